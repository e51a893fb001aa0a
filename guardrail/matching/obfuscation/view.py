"""The text as an obfuscation stream reads it: a streaming transducer over normalised characters.

What the reader sees is computed from the normalised text (``normalize.py``: NFKC, case folding,
default-ignorable code points removed, whitespace runs as one space) in up to four stages, each a small
finite-state machine, so that the view can be stepped character by character on a token stream and its
state is hashable (the artefact memoises token transitions on it):

1. **homoglyphs**: a look-alike letter becomes its prototype (``obfuscation.fold_homoglyph``);
2. **markup** (``+markup``): HTML tags are dropped (``<`` followed by a letter, ``/`` or ``!``, up to ``>``
   or :data:`MAX_TAG_CHARS`), character references decoded (``&#105;``, ``&#x69;``, ``&amp;``), and markdown
   emphasis with ``_`` or ``~`` dropped: a run of two or three inside a word (``f__u__ck``, ``f~~u~~ck``) or a
   run at a word's edge (``_fuck_``: ``_`` is a word character and would join the word). Emphasis with ``*``
   is read on the term side (the NFA skips it between letters), so that ``f**k`` stays visible to the censor
   rules;
3. **spaced runs** (``spaced`` and above): a maximal run of two or more single letters with the same
   separator between each two is joined (``f u c k`` → ``fuck``, ``t i t l e`` → ``title``). A single
   letter is a letter or digit with no letter or digit on either side, and not glued to a word by a symbol
   that stands for a letter (in ``a f*ck`` and ``I f-u-c-k`` the ``f`` begins the word: it does not join
   ``a``'s run; a space, a comma or a slash never glues). Where a run begins or
   ends with a one-letter word (:data:`~guardrail.matching.obfuscation.ONE_LETTER_WORDS`: ``a f u c k``,
   ``s h i t a``) the view emits :data:`~guardrail.matching.obfuscation.JOINT_MARK` between that letter and
   the rest: a non-word symbol that the term side may read through (``a s s`` is still ``ass``) or stop at
   (``a f u c k`` holds ``fuck`` after the one-letter word);
4. **stretched letters** (``spaced`` and above): in a run of one letter or digit (or leetspeak symbol), the
   second character becomes :data:`~guardrail.matching.obfuscation.STRETCH_MARK`, the third ``STRETCH_MARK_3``
   and the rest are dropped (``fuuuuck`` → ``fuMNck``, ``ass`` → ``asM``): the term side allows both marks
   after a single letter (one only where the doubled form is not a real word: ``suuck``, not ``rapping``)
   and requires the first after a doubled one, so ``as`` never reads as ``ass``. The joint mark passes
   through this stage without breaking a run.

Stages 2 and 3 decide some characters only after seeing the next one to three (is ``<`` a tag? is the
letter after a separator single?): those characters are *buffered* and emitted with a later character.
:meth:`View.buffered` tells the artefact, which treats a token boundary inside a buffered stretch like one
inside a split UTF-8 character: nothing before it is released, and a match that begins with a buffered
character rolls back to a clean token boundary before it (``Transition.lead``).

Every character travels with the index of the source character that produced it (``-1`` when stepping a
token stream, where no one asks, so states stay shared): :meth:`View.text` maps a match in the view back to
the original text exactly (a decoded reference takes the index of its ``&``; a stretch or joint mark the
index of the character it stands for).
"""

from __future__ import annotations

import functools
import html
from typing import NamedTuple

from guardrail.matching.normalize import fold_char, is_word_char
from guardrail.matching.obfuscation import (
    CENSOR_CHARS,
    EMPHASIS_CHARS,
    JOINT_MARK,
    ONE_LETTER_WORDS,
    SEPARATORS,
    STRETCH_MARK,
    STRETCH_MARK_3,
    data,
    fold_homoglyph,
)

#: A tag longer than this is not a tag: its characters stay dropped, the text after it is read again.
MAX_TAG_CHARS = 64
#: Longest character reference body (``#x1F600``, ``amp``) read before giving up on it.
MAX_REFERENCE_CHARS = 10

#: Symbols whose runs read as one stretched character too (``a$$$hole``): those leetspeak writes for letters.
STRETCHABLE_SYMBOLS = frozenset("$@!|+(<")

#: A character with the index of the source character it comes from (``-1`` on a token stream).
Item = tuple[str, int]

# Markup stage kinds: text, a "<" that may open a tag, inside a tag, a character reference, and a run of "_" or
# "~" that may be markdown emphasis (``_fuck_``: "_" is a word character, so it must go; ``f__u__ck``).
_TEXT, _LT, _TAG, _AMP, _US = range(5)
#: Longest run of ``_`` or ``~`` read as an emphasis delimiter (``___x___`` is bold italic).
MAX_UNDERSCORES = 3
#: Emphasis markers the markup stage reads (``*`` is read on the term side: it is also a censor character).
_DELIMITERS = frozenset("_~")
# Spaced stage phases: after a non-letter (or the start), after a single-letter candidate, inside a word, a
# separator buffered after a single letter, a separator and a letter buffered, a separator, a letter and a
# different separator buffered (is that letter the run's last, or the first of a word written with symbols?),
# and after symbols that stand for letters right after a word ("wh**"): a letter there continues that word.
_N0, _N1, _W, _S1, _S2, _S3, _G = range(7)
_FRESH, _GLUED = (_N0, (), False, (), False), (_G, (), False, (), False)
#: Symbols standing for letters read after a single letter before deciding whether they glue it to a word
#: (``a a**hole``, ``b*****d``).
MAX_GLUE_SYMBOLS = 8


class ViewState(NamedTuple):
    """Where the view stands (hashable; part of the stream state).

    Attributes:
        markup: ``(kind, data, start)`` of the markup stage (``data``: buffered items or a count; ``start``: the
            source index of the ``<`` or ``&`` that opened it; for text and a run of ``_``, what the character
            before was: a space or the text start, a word character, or another character).
        spaced: ``(phase, items, first_olw, held, second)`` of the spaced-run stage (``View._spaced``).
        stretch: ``(last character, its run so far, at most 3)`` of the stretch stage.
    """

    markup: tuple
    spaced: tuple
    stretch: tuple


# What the markup stage emitted last (a run of "_" is emphasis unless it stands inside a word or alone).
_SPACE, _WORD, _PUNCT = range(3)
START = ViewState((_TEXT, (), _SPACE), _FRESH, ("", 0))
_TEXT_AFTER = {kind: (_TEXT, (), kind) for kind in (_SPACE, _WORD, _PUNCT)}


def _is_letter(c: str) -> bool:
    return c.isalnum()


@functools.cache
def _letter_symbols() -> frozenset[str]:
    """Symbols that stand for a letter inside a word (censor characters, leetspeak, look-alike symbols, emphasis
    markers): after a single letter, they may glue it to the word that follows (``a f*ck``), so the spaced stage
    waits for the next letter before it joins that letter to a run; after a word, a letter that follows them
    continues the word (``wh**e``, ``bas~~tar~~d``). A space, a comma or a slash never glues."""
    tables = data()
    return CENSOR_CHARS | EMPHASIS_CHARS | frozenset("".join(tables.leet.values()) + "".join(tables.symbols.values()))


class View:
    """The stages of one stream (see the module docstring).

    Args:
        spaced: join spaced runs and read stretched letters (``spaced`` level and above).
        markup: read markup as rendered.
    """

    def __init__(self, spaced: bool, markup: bool):
        self.spaced = spaced
        self.markup = markup

    @staticmethod
    def buffered(state: ViewState) -> bool:
        """Whether characters read are still waiting to be emitted."""
        return state.markup[0] in (_LT, _AMP, _US) or state.spaced[0] in (_S1, _S2, _S3)

    def step(self, state: ViewState, char: str, out: list[Item], index: int = -1) -> ViewState:
        """Read one *normalised* character (``index``: its index in the source text, for :meth:`text`); append
        the items now emitted to ``out``."""
        char = fold_homoglyph(char)
        if not self.markup:
            return self._after_markup(state, (char, index), out)
        kind, data, start = state.markup
        if kind == _TAG:
            if char == ">" or data >= MAX_TAG_CHARS:
                return state._replace(markup=(_TEXT, (), _SPACE))
            return state._replace(markup=(_TAG, data + 1, start))
        if kind == _LT:
            if char.isascii() and (char.isalpha() or char in "/!"):
                return state._replace(markup=(_TAG, 1, start))
            state = self._text(state, ("<", start), out)
            return self.step(state, char, out, index)
        if kind == _AMP:
            body = "".join(c for c, _ in data)
            if char == ";" and body:
                decoded = html.unescape("&" + body + ";")
                if decoded != "&" + body + ";":
                    for raw in decoded:
                        for c in fold_char(raw):
                            state = self._text(state, (fold_homoglyph(c), start), out)
                    return state
            if len(data) < MAX_REFERENCE_CHARS and char.isascii() and (char.isalnum() or (char == "#" and not data)):
                return state._replace(markup=(_AMP, data + ((char, index),), start))
            # Not a character reference: the "&" is text. It is emitted here, not read again (read again it
            # would open the same reference and fail on the same character, forever); what followed it is read.
            state = self._text(state, ("&", start), out)
            for c, i in data:
                state = self.step(state, c, out, i)
            return self.step(state, char, out, index)
        if kind == _US:
            if char == data[0][0] and len(data) < MAX_UNDERSCORES:
                return state._replace(markup=(_US, data + ((char, index),), start))
            inside = start == _WORD and is_word_char(char)
            if (inside and len(data) == 1) or (start == _SPACE and char == " "):
                # one "_" inside a word (snake_case), or a run standing alone: text
                for item in data:
                    state = self._text(state, item, out)
            else:  # emphasis: inside a word (f__u__ck), or at a word's edge (_x, _@ss, x_, +_): dropped
                state = state._replace(markup=_TEXT_AFTER[start])
            return self.step(state, char, out, index)
        if char == "<":
            return state._replace(markup=(_LT, (), index))
        if char == "&":
            return state._replace(markup=(_AMP, (), index))
        if char in _DELIMITERS:
            return state._replace(markup=(_US, ((char, index),), start))
        return self._text(state, (char, index), out)

    def _text(self, state: ViewState, item: Item, out: list[Item]) -> ViewState:
        """Pass one item of text on from the markup stage."""
        c = item[0]
        kind = _SPACE if c == " " else _WORD if is_word_char(c) else _PUNCT
        return self._after_markup(state._replace(markup=_TEXT_AFTER[kind]), item, out)

    def _after_markup(self, state: ViewState, item: Item, out: list[Item]) -> ViewState:
        if not self.spaced:
            out.append(item)
            return state
        emitted: list[Item] = []
        spaced = self._spaced(state.spaced, item, emitted)
        stretch = state.stretch
        for it in emitted:
            stretch = self._stretch(stretch, it, out)
        return state._replace(spaced=spaced, stretch=stretch)

    @staticmethod
    def _joined(sep: Item, letter: Item, joint: bool, out: list[Item]) -> None:
        """Emit ``letter`` joined to its run, after a joint mark when ``joint`` (its index: the separator's)."""
        if joint:
            out.append((JOINT_MARK, sep[1]))
        out.append(letter)

    @staticmethod
    def _spaced(spaced: tuple, item: Item, out: list[Item]) -> tuple:
        """The spaced-run stage (module docstring). ``spaced`` is ``(phase, items, first_olw, held, second)``: the
        buffered separator, letter and second separator; whether the run so far is one one-letter word; a
        one-letter word of the run that is not emitted yet because only the next letters tell whether it is the
        run's last (then a joint mark goes before it: ``s h i t a lot``) or not; and whether the buffered letter
        is the run's second (two letters around a censor character are a censored word, ``t*t``, ``f*g``, not a
        run: a run with ``* . - _ •`` needs three letters)."""
        phase, items, first_olw, held, second = spaced
        char = item[0]
        letter_now = _is_letter(char)
        fresh = _FRESH
        if phase in (_S2, _S3):
            sep, letter = items[0], items[1]
            if phase == _S3 and not letter_now:
                if char in _letter_symbols() and len(items) < 2 + MAX_GLUE_SYMBOLS:  # "a a**hole": wait on
                    return (_S3, items + (item,), first_olw, held, second)
                if second and sep[0] in CENSOR_CHARS:  # "t*t" followed by symbols: a censored word, no run
                    out.extend(items)
                    return View._spaced(_GLUED, item, out)
                # the letter ends the run; the symbols after it are text, glued to it
                View._release(sep, held, first_olw, False, out)
                View._joined(sep, letter, (first_olw and not held) or letter[0] in ONE_LETTER_WORDS, out)
                out.extend(items[2:])
                return View._spaced(_GLUED, item, out)
            if letter_now:
                # The letter begins a word ("a fuck", "a f*ck", "I f-u-c-k"): the run ends before it and its
                # separator stays; in S3 the letter is read again from a fresh start with what followed it.
                View._release(sep, held, first_olw, True, out)
                out.append(sep)
                if phase == _S2:
                    out.extend((letter, item))
                    return (_W, (), False, (), False)
                state = fresh
                for buffered in (letter, *items[2:], item):
                    state = View._spaced(state, buffered, out)
                return state
            if char == sep[0]:  # a letter inside the run: joined (held back if a one-letter word)
                View._release(sep, held, first_olw, False, out)
                joint = first_olw and not held
                if letter[0] in ONE_LETTER_WORDS:
                    return (_S1, (item,), joint, (letter,), False)
                View._joined(sep, letter, joint, out)
                return (_S1, (item,), False, (), False)
            if char in _letter_symbols():  # may glue the letter to a word: "a f*ck", "x b!tch", "I f-u-c-k"
                return (_S3, (sep, letter, item), first_olw, held, second)
            if second and sep[0] in CENSOR_CHARS:  # "t*t", "f*g.": a censored word, no run
                out.extend((sep, letter, item))
                return _GLUED if char in _letter_symbols() else fresh
            View._release(sep, held, first_olw, False, out)  # the run's last letter, then other text
            View._joined(sep, letter, (first_olw and not held) or letter[0] in ONE_LETTER_WORDS, out)
            out.append(item)
            return _GLUED if char in _letter_symbols() else fresh
        if phase == _S1:
            if letter_now:
                return (_S2, (items[0], item), first_olw, held, second)
            View._release(items[0], held, first_olw, True, out)
            out.append(items[0])  # no run: the separator is text, glued to the letter before it if a symbol
            return View._spaced(_GLUED if items[0][0] in _letter_symbols() else fresh, item, out)
        if letter_now:
            out.append(item)
            if phase == _N0:
                return (_N1, (), char in ONE_LETTER_WORDS, (), False)
            return (_W, (), False, (), False)  # inside a word, or glued to one by symbols ("wh**e")
        if phase == _N1 and char in SEPARATORS:
            return (_S1, (item,), first_olw, (), True)
        out.append(item)
        if phase in (_W, _N1, _G) and char in _letter_symbols():
            return _GLUED
        return fresh

    @staticmethod
    def _release(sep: Item, held: tuple, first_olw: bool, last: bool, out: list[Item]) -> None:
        """Emit the held one-letter word: the run's last letter (a joint mark before it) or an inner one (a joint
        mark only when it is the run's second letter after a one-letter word)."""
        if held:
            View._joined(sep, held[0], last or first_olw, out)

    @staticmethod
    def _stretch(stretch: tuple, item: Item, out: list[Item]) -> tuple:
        char = item[0]
        if char == JOINT_MARK:  # a joint inside a spaced run does not break a stretched letter ("a s s")
            out.append(item)
            return stretch
        last, run = stretch
        if char == last and (_is_letter(char) or char in STRETCHABLE_SYMBOLS):
            if run == 1:
                out.append((STRETCH_MARK, item[1]))
            elif run == 2:
                out.append((STRETCH_MARK_3, item[1]))
            return (last, min(run + 1, 3))
        out.append(item)
        return (char, 1)

    def flush(self, state: ViewState, out: list[Item]) -> None:
        """End of text: emit what is buffered (a pending tag is dropped, as a browser drops it)."""
        kind, data, start = state.markup
        if self.markup and kind in (_LT, _AMP, _US):
            # an open "<" or "&" is text; a run of "_" at the very end closes emphasis (dropped) unless alone
            pending = [("<", start)] if kind == _LT else [("&", start), *data] if kind == _AMP else \
                list(data) if start == _SPACE else []
            for item in pending:
                state = self._text(state, item, out)
        if not self.spaced:
            return
        phase, items, first_olw, held, second = state.spaced
        emitted: list[Item] = []
        if phase == _S1:
            self._release(items[0], held, first_olw, True, emitted)
            emitted.append(items[0])
        elif phase in (_S2, _S3) and second and items[0][0] in CENSOR_CHARS:  # "t*t": a censored word
            emitted.extend(items)
        elif phase in (_S2, _S3):
            self._release(items[0], held, first_olw, False, emitted)
            letter = items[1]
            self._joined(items[0], letter, (first_olw and not held) or letter[0] in ONE_LETTER_WORDS, emitted)
            emitted.extend(items[2:])
        stretch = state.stretch
        for item in emitted:
            stretch = self._stretch(stretch, item, out)

    def text(self, norm: str) -> tuple[str, list[int]]:
        """The view of a whole normalised text, with each view character's source index in ``norm`` (the
        index of the character it comes from; the text matcher maps spans back with it)."""
        out: list[Item] = []
        state = START
        for index, char in enumerate(norm):
            state = self.step(state, char, out, index)
        self.flush(state, out)
        return "".join(c for c, _ in out), [i for _, i in out]
