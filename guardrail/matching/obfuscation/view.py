"""The text as an obfuscation stream reads it: a streaming transducer over normalised characters.

What the reader sees is computed from the normalised text (``normalize.py``: NFKC, case folding,
default-ignorable code points removed, whitespace runs as one space) in up to four stages, each a small
finite-state machine, so that the view can be stepped character by character on a token stream and its
state is hashable (the artefact memoises token transitions on it):

1. **homoglyphs**: a look-alike letter becomes its prototype (``obfuscation.fold_homoglyph``);
2. **markup** (``+markup``): HTML tags are dropped (``<`` followed by a letter, ``/`` or ``!``, up to ``>``
   or :data:`MAX_TAG_CHARS`), character references decoded (``&#105;``, ``&#x69;``, ``&amp;``), and a
   doubled emphasis marker right after a word character dropped (``f**u**ck``, ``f~~u~~ck``);
3. **spaced runs** (``spaced`` and above): a maximal run of two or more single letters with the same
   separator between each two is joined (``f u c k`` → ``fuck``, ``t i t l e`` → ``title``). A single
   letter is a letter or digit with no letter or digit on either side; ``I shit`` stays as it is (a run
   of one);
4. **stretched letters** (``spaced`` and above): in a run of one letter or digit (or leetspeak symbol), the
   second character becomes :data:`~guardrail.matching.obfuscation.STRETCH_MARK`, the third ``STRETCH_MARK_3``
   and the rest are dropped (``fuuuuck`` → ``fuMNck``, ``ass`` → ``asM``): the term side allows both marks
   after a single letter and requires the first after a doubled one, so ``as`` never reads as ``ass`` and
   ``rapping`` never as ``raping``.

Stages 2 and 3 decide some characters only after seeing the next one or two (is ``<`` a tag? is the
letter after a separator single?): those characters are *buffered* and emitted with a later character.
:meth:`View.buffered` tells the artefact, which treats a token boundary inside a buffered stretch like one
inside a split UTF-8 character: nothing before it is released, and a match that begins with a buffered
character rolls back to the token where that character was (``Transition.lead``).
"""

from __future__ import annotations

import html
from typing import NamedTuple

from guardrail.matching.normalize import fold_char
from guardrail.matching.obfuscation import EMPHASIS_CHARS, SEPARATORS, STRETCH_MARK, STRETCH_MARK_3, fold_homoglyph

#: A tag longer than this is not a tag: its characters stay dropped, the text after it is read again.
MAX_TAG_CHARS = 64
#: Longest character reference body (``#x1F600``, ``amp``) read before giving up on it.
MAX_REFERENCE_CHARS = 10

#: Symbols whose runs read as one stretched character too (``a$$$hole``): those leetspeak writes for letters.
_STRETCHABLE_SYMBOLS = frozenset("$@!|+(<")

# Markup stage kinds.
_TEXT, _LT, _TAG, _AMP, _EMPH1, _EMPH = range(6)
# Spaced stage phases: after a non-letter (or the start), after a single-letter candidate, inside a
# word, a separator buffered after a single letter, a separator and a letter buffered.
_N0, _N1, _W, _S1, _S2 = range(5)


class ViewState(NamedTuple):
    """Where the view stands (hashable; part of the stream state).

    Attributes:
        markup: ``(kind, data, after_word)`` of the markup stage.
        spaced: ``(phase, separator, letter)`` of the spaced-run stage.
        stretch: ``(last character, its run so far, at most 3)`` of the stretch stage.
    """

    markup: tuple
    spaced: tuple
    stretch: tuple


START = ViewState((_TEXT, "", False), (_N0, "", ""), ("", 0))


def _is_letter(c: str) -> bool:
    return c.isalnum()


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
        return state.markup[0] in (_LT, _AMP, _EMPH1) or state.spaced[0] in (_S1, _S2)

    def step(self, state: ViewState, char: str, out: list[str]) -> ViewState:
        """Read one *normalised* character; append the characters now emitted to ``out``."""
        char = fold_homoglyph(char)
        if not self.markup:
            return self._after_markup(state, state.markup, char, out)
        kind, data, after_word = state.markup
        if kind == _TAG:
            if char == ">" or data >= MAX_TAG_CHARS:
                return state._replace(markup=(_TEXT, "", after_word))
            return state._replace(markup=(_TAG, data + 1, after_word))
        if kind == _LT:
            if char.isascii() and (char.isalpha() or char in "/!"):
                return state._replace(markup=(_TAG, 1, after_word))
            state = self._after_markup(state, (_TEXT, "", False), "<", out)
            return self.step(state._replace(markup=(_TEXT, "", False)), char, out)
        if kind == _AMP:
            if char == ";" and data:
                decoded = html.unescape("&" + data + ";")
                if decoded != "&" + data + ";":
                    markup = (_TEXT, "", after_word)
                    for raw in decoded:
                        for c in fold_char(raw):
                            c = fold_homoglyph(c)
                            state = self._after_markup(state, markup, c, out)
                            markup = (_TEXT, "", _is_letter(c))
                    return state._replace(markup=markup)
            if len(data) < MAX_REFERENCE_CHARS and char.isascii() and (char.isalnum() or (char == "#" and not data)):
                return state._replace(markup=(_AMP, data + char, after_word))
            # Not a character reference: the "&" is text. It is emitted here, not read again (read again it
            # would open the same reference and fail on the same character, forever); what followed it is read.
            state = self._after_markup(state, (_TEXT, "", False), "&", out)
            for c in data:
                state = self.step(state, c, out)
            return self.step(state, char, out)
        if kind == _EMPH1:
            if char == data:
                return state._replace(markup=(_EMPH, data, after_word))
            state = self._after_markup(state, (_TEXT, "", False), data, out)
            return self.step(state._replace(markup=(_TEXT, "", False)), char, out)
        if kind == _EMPH and char == data:
            return state
        # _TEXT (or the end of a dropped emphasis run)
        if char == "<":
            return state._replace(markup=(_LT, "", after_word))
        if char == "&":
            return state._replace(markup=(_AMP, "", after_word))
        if char in EMPHASIS_CHARS and after_word:
            return state._replace(markup=(_EMPH1, char, after_word))
        return self._after_markup(state, (_TEXT, "", _is_letter(char)), char, out)

    def _after_markup(self, state: ViewState, markup: tuple, char: str, out: list[str]) -> ViewState:
        if not self.spaced:
            out.append(char)
            return state._replace(markup=markup)
        emitted: list[str] = []
        spaced = self._spaced(state.spaced, char, emitted)
        stretch = state.stretch
        for c in emitted:
            stretch = self._stretch(stretch, c, out)
        return ViewState(markup, spaced, stretch)

    @staticmethod
    def _spaced(spaced: tuple, char: str, out: list[str]) -> tuple:
        phase, sep, letter = spaced
        letter_now = _is_letter(char)
        if phase == _S2:
            if letter_now:  # the buffered letter begins a word: no run, the separator stays
                out.extend((sep, letter, char))
                return (_W, "", "")
            out.append(letter)  # the buffered letter is single: joined to the run
            if char == sep:
                return (_S1, sep, "")
            out.append(char)
            return (_N0, "", "")
        if phase == _S1:
            if letter_now:
                return (_S2, sep, char)
            out.append(sep)
            return View._spaced((_N0, "", ""), char, out)
        if letter_now:
            out.append(char)
            return (_N1 if phase == _N0 else _W, "", "")
        if phase == _N1 and char in SEPARATORS:
            return (_S1, char, "")
        out.append(char)
        return (_N0, "", "")

    @staticmethod
    def _stretch(stretch: tuple, char: str, out: list[str]) -> tuple:
        last, run = stretch
        if char == last and (_is_letter(char) or char in _STRETCHABLE_SYMBOLS):
            if run == 1:
                out.append(STRETCH_MARK)
            elif run == 2:
                out.append(STRETCH_MARK_3)
            return (last, min(run + 1, 3))
        out.append(char)
        return (char, 1)

    def flush(self, state: ViewState, out: list[str]) -> None:
        """End of text: emit what is buffered (a pending tag is dropped, as a browser drops it)."""
        kind, data, _ = state.markup
        if self.markup and kind in (_LT, _AMP, _EMPH1):
            pending = {_LT: "<", _AMP: "&" + data, _EMPH1: data}[kind]
            state = state._replace(markup=(_TEXT, "", False))
            for c in pending:
                state = self._after_markup(state, (_TEXT, "", False), c, out)
        if not self.spaced:
            return
        phase, sep, letter = state.spaced
        emitted = [letter] if phase == _S2 else [sep] if phase == _S1 else []
        stretch = state.stretch
        for c in emitted:
            stretch = self._stretch(stretch, c, out)

    def text(self, norm: str) -> tuple[str, list[int]]:
        """The view of a whole normalised text, with each view character's source index in ``norm`` (the
        index of the character whose reading emitted it; the text matcher maps spans back with it)."""
        out: list[str] = []
        offsets: list[int] = []
        state = START
        cursor = 0  # the first character read whose output is not placed yet
        for index, char in enumerate(norm):
            before = len(out)
            state = self.step(state, char, out)
            cursor = self._place(norm, out, before, cursor, index, offsets)
        before = len(out)
        self.flush(state, out)
        self._place(norm, out, before, cursor, len(norm) - 1, offsets)
        return "".join(out), offsets

    @staticmethod
    def _place(norm: str, out: list[str], before: int, cursor: int, index: int, offsets: list[int]) -> int:
        """Give each character emitted by the last step (``out[before:]``) its source index: buffered
        characters come out in reading order, so each is the next unplaced source character that reads as
        it; a character no source spells (a decoded reference, the stretch mark) takes the latest index."""
        for c in out[before:]:
            j = cursor
            while j <= index and fold_homoglyph(norm[j]) != c:
                j += 1
            if j <= index:
                offsets.append(j)
                cursor = j + 1
            else:
                offsets.append(min(max(cursor - 1, 0), index) if c in (STRETCH_MARK, STRETCH_MARK_3) else index)
        return cursor
