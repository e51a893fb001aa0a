"""The NFA of obfuscated terms: per term position a class of characters, real letters counted.

Built for :class:`~guardrail.matching.obfuscation.automaton.ObfuscationAutomaton`, whose subset construction
(:class:`~guardrail.matching.regex.automaton.RegexAutomaton`) tracks where each match began, exactly as for
regex terms. The text it reads is the stream's view (:mod:`guardrail.matching.obfuscation.view`): look-alike
letters already folded, spaced runs joined, runs of three or more letters read as two, markup dropped.

A term's character ``c`` (homoglyph-folded) is read as

* a **real** letter: ``c`` itself or, for an ASCII letter, one of its accented forms (``u`` reads ``ú``,
  ``ü``…; an accented term letter reads only itself), or the same written decomposed (a letter followed by
  combining marks, which are read through);
* a **leet** character (``leet`` and above): ``4`` or ``@`` for ``a``, and the look-alike symbols of the
  ``symbols`` table (``¡`` for ``i``, ``|`` for ``l``) — not a real letter;
* a **censor** character (``masked``, at most once, never the first or last letter, terms of
  :data:`~guardrail.matching.obfuscation.MIN_CENSOR_LETTERS` letters or more) — not a real letter;

and, from ``spaced`` on, a term letter may be followed by the view's stretch marks (the view reads ``uuuu`` as
``uMN``, ``ss`` as ``sM``): a single letter by both or none, or by the first alone where
:func:`~guardrail.matching.obfuscation.forms.doubling_positions` allows it (``suuck``), a doubled one by the
first and maybe the second (``as`` never reads as ``ass``). Between two letters a spaced view's joint mark and,
with ``+markup``, ``*`` emphasis markers (``f**u**ck``) are read through. A form matches when it holds at
least :data:`~guardrail.matching.obfuscation.MIN_REAL_LETTERS` real letters, is not preceded by a word
character (``word`` and ``prefix`` terms) and not followed by one (``word`` terms).

Besides that layered path, whole forms from :mod:`guardrail.matching.obfuscation.forms` are added as chains:
the leet forms of a three-letter term that keep one real letter (``4ss``), the one-edit forms of long terms
(``masturbaton``) and the runs of two or more censor characters (``f**k``, ``b***h``).

The marks, the joint, combining marks and emphasis markers are *uncounted* (:attr:`ObfuscationNfa.uncounted`):
they move threads but are not characters of a form, so loops on them keep the automaton finite.

States are layered: before each term position, one node per (real letters so far, capped at 2; censor
used), so a term of ``n`` characters unrolls to at most ``6 n`` nodes plus one reader per edge, plus the
chains (``O(n²)`` nodes for the censor runs of a term).
"""

from __future__ import annotations

import array
import contextlib
import functools
import gc
import itertools
import unicodedata
from collections.abc import Iterator, Sequence
from typing import NamedTuple

import numpy as np

from guardrail.matching.charset import CharSet
from guardrail.matching.obfuscation import (
    CENSOR_CHARS,
    JOINT_MARK,
    MIN_CENSOR_LETTERS,
    MIN_REAL_LETTERS,
    STRETCH_MARK,
    STRETCH_MARK_3,
    Obfuscation,
    ObfuscationLevel,
    data,
    fold_homoglyph,
)
from guardrail.matching.obfuscation.forms import (
    censor_runs,
    doubling_positions,
    edit_spellings,
    edits,
    joined_letters,
    one_real_letter_forms,
)
from guardrail.matching.obfuscation.lexicon import lexicon
from guardrail.matching.obfuscation.view import STRETCHABLE_SYMBOLS
from guardrail.matching.regex.nfa import AFTER_NONWORD, ALWAYS, BEFORE_NONWORD, Nfa
from guardrail.wordlists.wordlist import MatchMode


class ObfuscatedTerm(NamedTuple):
    """One term of an obfuscation stream.

    Attributes:
        normalized: the term's normalised text (``normalize_term``).
        match: ``word`` or ``prefix``.
        level: its effective level (``obfuscation.effective``), not ``off``.
    """

    normalized: str
    match: MatchMode
    level: Obfuscation


def view_of_term(normalized: str) -> str:
    """The term with its look-alike letters folded, as the stream's view spells text."""
    return "".join(fold_homoglyph(c) for c in normalized)


def term_runs(text: str, spaced: bool) -> list[tuple[str, int]]:
    """The positions of a term: ``(character, run length)``. A spaced view reads a run of one character as
    that character and :data:`~guardrail.matching.obfuscation.STRETCH_MARK`, so there a run is one
    position; elsewhere every character is."""
    runs: list[tuple[str, int]] = []
    for c in text:
        if spaced and runs and runs[-1][0] == c and c.isalnum():
            runs[-1] = (c, runs[-1][1] + 1)
        else:
            runs.append((c, 1))
    return runs


class _StoredMoves(Sequence[list[tuple[int, int]]]):
    """``Nfa.moves`` of a stored NFA, read per state on demand (a loaded automaton visits few of its ~40k
    states; building every state's list would be most of a warm load)."""

    def __init__(self, offsets: array.array, conditions: array.array, targets: array.array):
        self._offsets, self._conditions, self._targets = offsets, conditions, targets

    def __len__(self) -> int:
        return len(self._offsets) - 1

    def __getitem__(self, state):
        if isinstance(state, slice):
            return [self[i] for i in range(*state.indices(len(self)))]
        begin, end = self._offsets[state], self._offsets[state + 1]
        return list(zip(self._conditions[begin:end], self._targets[begin:end], strict=True))


@contextlib.contextmanager
def gc_paused() -> Iterator[None]:
    """Build tens of thousands of small objects without the cyclic collector scanning the process's heap in the
    middle (a serving process holds millions of objects: the vocab's tables; measured, it tripled the time of
    a warm load and of a request's terms). None of these objects form cycles."""
    collecting = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if collecting:
            gc.enable()


def _within(values: np.ndarray, low: int, high: int) -> bool:
    """Every value in ``[low, high)`` (an empty array is)."""
    return not len(values) or (int(values.min()) >= low and int(values.max()) < high)


def _ints(values: np.ndarray) -> array.array:
    """``values`` as an ``array('i')``: one copy of the bytes, and indexing returns Python ints (a
    ``tolist()`` of a stored NFA's ~40k states builds ~250k objects: most of a warm load's NFA cost, for
    states the automaton mostly never visits)."""
    return array.array("i", np.ascontiguousarray(values, dtype=np.int32).tobytes())


@functools.lru_cache(maxsize=4096)
def _charset(chars: str) -> CharSet:
    return CharSet.of(ord(c) for c in chars)


@functools.cache
def combining_marks() -> str:
    """The combining marks an accented letter of the ``diacritics`` table decomposes into (NFD): what follows
    a plain letter when text is written decomposed (``u`` + U+0301 for ``ú``)."""
    marks = {m for accented in data().diacritics.values() for letter in accented
             for m in unicodedata.normalize("NFD", letter)[1:] if unicodedata.category(m) == "Mn"}
    return "".join(sorted(marks))


#: The layer key of a node entered by a censor run (``_censor_edges``): real letters no longer counted (the run
#: is read against the visible letters and the list), no second censor character, and no ``*`` read through
#: after it (``t**t`` is ``twat``'s run, not ``tit``'s ``t*t`` with a markdown star).
EDITED = (MIN_REAL_LETTERS, 2)
#: The censor characters as one class, and those that abbreviations and hyphenated words do not hold.
CENSOR = "".join(sorted(CENSOR_CHARS))
GRAWLIX = "".join(sorted(CENSOR_CHARS - set(".-_")))

#: The emphasis marker read between two letters of a term with ``+markup`` (``f**u**ck``); the view drops the
#: others (``_``, ``~``).
EMPHASIS_MARKER = "*"


def uncounted_chars(spaced: bool, markup: bool) -> str:
    """Symbols a stream's threads read without counting them as characters of a form (module docstring):
    combining marks, and the stretch and joint marks of a spaced view, and ``*`` with markup."""
    chars = combining_marks()
    if spaced:
        chars += STRETCH_MARK + STRETCH_MARK_3 + JOINT_MARK
    if markup:
        chars += EMPHASIS_MARKER
    return chars


def form_symbols(form: str, spaced: bool) -> list[str]:
    """The symbols a view emits for ``form`` written plainly: in a spaced view the second of two equal letters,
    digits or stretchable symbols is the stretch mark (``4ss`` → ``4``, ``s``, ``M``; ``a$$`` → ``a``, ``$``,
    ``M``: ``view.STRETCHABLE_SYMBOLS``)."""
    symbols: list[str] = []
    run = 0
    for i, c in enumerate(form):
        run = run + 1 if spaced and i and form[i - 1] == c and (c.isalnum() or c in STRETCHABLE_SYMBOLS) else 1
        if run <= 3:
            symbols.append((c, STRETCH_MARK, STRETCH_MARK_3)[run - 1])
    return symbols


class ObfuscationNfa(Nfa):
    """The union NFA of obfuscated terms (the same attributes and closure as :class:`Nfa`).

    Args:
        terms: per local term id, the term.
        spaced: the stream's view joins spaced runs and reads stretched letters.
        markup: the stream reads markup (emphasis markers inside a term are skipped).

    Attributes:
        uncounted: the characters threads read without counting them (:func:`uncounted_chars`).
    """

    def __init__(self, terms: Sequence[ObfuscatedTerm], spaced: bool, markup: bool = False):  # noqa: D107
        self._start_empty()
        self._ids: dict[str | CharSet, int] = {}
        self.uncounted = _charset(uncounted_chars(spaced, markup))
        views = [view_of_term(t.normalized) for t in terms]
        runs = censor_runs(views)
        others = frozenset(views)
        # The rules ask the lexicon about the term as written (a Cyrillic word is looked up in Cyrillic); the
        # automaton reads its view (look-alike letters folded), one character for one, so positions agree.
        edited = [edits(t.normalized, t.match, others) if t.level.level >= ObfuscationLevel.MASKED else ()
                  for t in terms]
        joints = joined_letters([(t.normalized, t.match) for t in terms],
                                [edit_spellings(t.normalized, e) for t, e in zip(terms, edited)]) if spaced else \
            [("", "")] * len(terms)
        with gc_paused():
            for term_id, term in enumerate(terms):
                masked = term.level.level >= ObfuscationLevel.MASKED
                self.starts.append(self._term(term_id, term, views[term_id], spaced, markup,
                                              runs[term_id] if masked else (), edited[term_id], joints[term_id]))

    def to_arrays(self) -> dict[str, np.ndarray]:
        """The NFA as flat ``int32`` arrays (what the artefact codec stores: rebuilding the NFA of a list from
        its terms costs ~0.2 s, reading these a few ms)."""
        # Flattened by iterators into ``fromiter`` (no list of ~100k tuples for ``asarray`` to walk: 4x faster).
        chain = itertools.chain.from_iterable
        counts = np.fromiter(map(len, self.moves), dtype=np.int32, count=len(self.moves))
        move_offsets = np.zeros(len(self.moves) + 1, dtype=np.int32)
        np.cumsum(counts, out=move_offsets[1:])
        moves = np.fromiter(chain(chain(self.moves)), dtype=np.int32, count=2 * int(move_offsets[-1]))
        ranges = [r for charset in self.charsets for r in charset.ranges]
        return {
            "consumes": np.fromiter(self.consumes, dtype=np.int32, count=len(self.consumes)),
            "target": np.fromiter(self.target, dtype=np.int32, count=len(self.target)),
            "accepts": np.fromiter(self.accepts, dtype=np.int32, count=len(self.accepts)),
            "starts": np.asarray(self.starts, dtype=np.int32),
            "move_offsets": move_offsets,
            "moves": moves.reshape(-1, 2),
            "charset_offsets": np.cumsum([0] + [len(c.ranges) for c in self.charsets], dtype=np.int32),
            "ranges": np.asarray(ranges, dtype=np.int32).reshape(-1, 2),
            "uncounted": np.asarray(self.uncounted.ranges, dtype=np.int32).reshape(-1, 2),
        }

    @classmethod
    def from_arrays(cls, arrays: dict[str, np.ndarray]) -> ObfuscationNfa:
        """The NFA :meth:`to_arrays` wrote.

        Raises:
            ValueError: the arrays do not describe a well-formed NFA (an index out of range).
        """
        states, sets = len(arrays["consumes"]), len(arrays["charset_offsets"]) - 1
        moves = arrays["moves"]
        if not (len(arrays["target"]) == len(arrays["accepts"]) == len(arrays["move_offsets"]) - 1 == states
                and _within(arrays["consumes"], -1, sets) and _within(arrays["target"], -1, states)
                and _within(arrays["starts"], 0, states) and _within(moves[:, 1], 0, states)
                and _within(arrays["move_offsets"], 0, len(moves) + 1)
                and _within(arrays["uncounted"], 0, 0x110000)):
            raise ValueError("obfuscation NFA arrays out of range")
        nfa = cls.__new__(cls)
        nfa.consumes = _ints(arrays["consumes"])
        nfa.target = _ints(arrays["target"])
        nfa.accepts = _ints(arrays["accepts"])
        nfa.starts = _ints(arrays["starts"])
        nfa.moves = _StoredMoves(  # type: ignore[assignment]  # read-only: closure() only reads it
            _ints(arrays["move_offsets"]), _ints(moves[:, 0]), _ints(moves[:, 1]))
        bounds = arrays["charset_offsets"].tolist()
        ranges = [tuple(r) for r in arrays["ranges"].tolist()]
        nfa.charsets = [CharSet(tuple(ranges[bounds[i]:bounds[i + 1]])) for i in range(sets)]
        nfa._charset_ids = {charset: i for i, charset in enumerate(nfa.charsets)}
        nfa._closures = {}
        nfa.uncounted = CharSet(tuple(tuple(r) for r in arrays["uncounted"].tolist()))
        return nfa

    def _reader(self, source: int, chars: str | CharSet, target: int) -> None:
        """A state reading one character of ``chars`` (a string of characters, or a class) from ``source``
        into ``target`` (inlined: an obfuscation NFA has ~100k of them)."""
        key = chars
        charset_id = self._ids.get(key)
        if charset_id is None:
            charset = chars if isinstance(chars, CharSet) else _charset(chars)
            charset_id = self._charset_ids.setdefault(charset, len(self.charsets))
            if charset_id == len(self.charsets):
                self.charsets.append(charset)
            self._ids[key] = charset_id
        reader = len(self.consumes)
        self.consumes.append(charset_id)
        self.target.append(target)
        self.moves.append([])
        self.accepts.append(-1)
        self.moves[source].append((ALWAYS, reader))

    def _chain(self, source: int, symbols: Sequence[str | CharSet], target: int) -> None:
        """Read ``symbols`` (characters or classes) from ``source`` into ``target``."""
        for i, symbol in enumerate(symbols):
            nxt = target if i == len(symbols) - 1 else self._new()
            self._reader(source, symbol, nxt)
            source = nxt

    def _term(self, term_id: int, term: ObfuscatedTerm, text: str, spaced: bool, markup: bool,
              censored_runs: Sequence[tuple[int, int]], edited: Sequence[tuple[str, int]],
              joints: tuple[str, str]) -> int:
        tables = data()
        level = term.level.level
        runs = term_runs(text, spaced)
        n = len(runs)
        letters = sum(c.isalpha() for c, _ in runs)
        censor_ok = level >= ObfuscationLevel.MASKED and letters >= MIN_CENSOR_LETTERS
        marks = combining_marks()
        # Read through between two letters: combining marks, a spaced view's joint, ``*`` emphasis with markup
        # (the view drops ``_`` and ``~`` emphasis).
        between = marks + (JOINT_MARK if spaced else "") + (EMPHASIS_MARKER if markup else "")
        # Run index -> index of its first character in ``text`` (doubling is decided per character).
        starts = [sum(r for _, r in runs[:i]) for i in range(n)] + [len(text)]
        doubled = doubling_positions(term.normalized, term.match) if spaced else frozenset()
        edges = self._censor_edges(runs, starts, censored_runs)
        needed = {target for _, target, _ in edges}  # layers entered by a censor run (key EDITED)
        start = self._new()
        first = self._move(start, AFTER_NONWORD)
        end = self._new()
        # layers[i][(real, censored)] = the node before position i (run i); censored: an edit was made
        layers: list[dict[tuple[int, int], int]] = [{(0, 0): first}]
        # Accented letters read as the term's plain one, except where that reads a real word ("merdé", "négro").
        spared: dict[int, set[str]] = {}
        for word in lexicon().accented(term.normalized):
            for k, (a, b) in enumerate(zip(word, term.normalized)):
                if a != b:
                    spared.setdefault(k, set()).add(a)
        for i, (c, run) in enumerate(runs):
            real = c + (tables.diacritics.get(c, "") if c.isascii() else "")
            if starts[i] in spared:
                real = "".join(x for x in real if x not in spared[starts[i]])
            leet = (tables.leet.get(c, "") + tables.symbols.get(c, "")
                    if level >= ObfuscationLevel.LEET and c.isascii() else "")
            inner = 0 < i < n - 1 and c.isalpha() and run == 1
            nxt: dict[tuple[int, int], int] = {}
            last = i == n - 1
            # What may follow this position, read without counting: a single letter may be stretched to three or
            # more ("fuMNck"), or doubled where allowed ("suMck"), though not after a censor character or an edit
            # (the two together could spell a real word); a doubled one stretched ("asMN"); then marks.
            loop = marks if last else between
            stretch = spaced and c.isalnum()
            doubling = stretch and run == 1 and starts[i] in doubled
            decomposed = unicodedata.normalize("NFD", c) if not c.isascii() else c

            def node(key: tuple[int, int], nxt=nxt, loop=loop, stretch=stretch, single=run == 1,
                     doubling=doubling) -> int:
                found = nxt.get(key)
                if found is None:
                    found = nxt[key] = self._new()
                    if doubling and not key[1]:  # the marks loop: M alone (a double) or M then N
                        self._reader(found, loop + STRETCH_MARK + STRETCH_MARK_3, found)
                        return found
                    if stretch and single:  # three or more, never a double: M then N
                        middle = self._new()
                        self._reader(found, STRETCH_MARK, middle)
                        self._reader(middle, STRETCH_MARK_3, found)
                    looped = loop.replace(EMPHASIS_MARKER, "") if key == EDITED else loop
                    self._reader(found, looped + STRETCH_MARK_3 if stretch and not single else looped, found)
                return found

            for (real_count, censored), here in layers[-1].items():
                bumped = (min(real_count + 1, MIN_REAL_LETTERS), censored)
                reads = [(real, bumped)]
                if leet:
                    reads.append((leet, (real_count, censored)))
                for chars, key in reads:
                    if run == 1:
                        self._reader(here, chars, node(key))
                    else:  # a doubled letter: the character, then the mark ("ass" reads "asM")
                        middle = self._new()
                        self._reader(here, chars, middle)
                        self._reader(middle, STRETCH_MARK, node(key))
                if len(decomposed) > 1:  # an accented term letter written decomposed: base, then its marks
                    self._chain(here, list(decomposed), node(bumped))
                if censor_ok and inner and not censored:
                    self._reader(here, CENSOR, node((real_count, 1)))
            if i + 1 in needed:
                node(EDITED)
            layers.append(nxt)
        for (real_count, _), here in layers[-1].items():
            if real_count >= MIN_REAL_LETTERS:
                self.moves[here].append((ALWAYS, end))
        plain = self._plain(first, text, spaced) if edges or edited else []
        ladders: dict[tuple[int, str], list[int]] = {}
        for start_char, target_layer, (hidden, length, tail) in edges if plain else ():
            # From the letters before the run as they are (the run is read against the visible letters:
            # censor_runs), nothing read through between them and the run (t**t is not tit's t*t with a
            # markdown star): one ladder of censor characters per start, left after each allowed length.
            ladder = ladders.setdefault((start_char, hidden), [plain[start_char]])
            while len(ladder) <= length:
                ladder.append(self._new())
                self._reader(ladder[-2], hidden, ladder[-1])
            target = layers[target_layer][EDITED]
            if tail:
                self._reader(ladder[length], tail, target)
            else:
                self.moves[ladder[length]].append((ALWAYS, target))
        if edited and plain:
            self._edited(plain, end, text, spaced, edited)
        if level >= ObfuscationLevel.LEET:  # whole leet forms of a short term that keep one real letter
            for form in one_real_letter_forms(term.normalized, term.match):
                self._chain(first, form_symbols(form, spaced), end)
        accept = self._move(end, BEFORE_NONWORD) if term.match is MatchMode.WORD else end
        self.accepts[accept] = term_id
        if spaced:  # a one-letter word and the joint mark before the form, or after it (``JOINT_MARK``)
            before, after = joints
            if before:
                self._chain(self._move(start, AFTER_NONWORD), [before, JOINT_MARK], first)
            if after and term.match is MatchMode.WORD:
                joined = self._new()
                # the letter after the joint is the view's stretch mark when it repeats the term's last letter
                # ("w h o r e e": the joint does not break the run of "e")
                self._chain(end, [JOINT_MARK, after + (STRETCH_MARK if text[-1] in after else "")], joined)
                self.moves[joined].append((BEFORE_NONWORD, accept))
        return start

    @staticmethod
    def _censor_edges(runs: Sequence[tuple[str, int]], starts: Sequence[int], censored_runs: Sequence[tuple[int, int]]
                      ) -> list[tuple[int, int, tuple[str, int, str]]]:
        """The censor runs as ``(start character, to layer, (censor class, length, letter after))``: from the
        plain term's chain after its first ``start`` characters to the layered path's position after the run
        (runs in a spaced view); a run that hides the first half of a double reads the other half as the letter
        alone."""
        layer_of = {start: i for i, start in enumerate(starts)}
        # Half of a double: the position after its first letter, and what is read there (the letter alone).
        inside = {starts[i] + 1: i for i, (_, run) in enumerate(runs) if run == 2}
        out: list[tuple[int, int, tuple[str, int, str]]] = []
        for start, length in censored_runs:
            end = start + length
            # one hidden letter of a three-letter term: not "." "-" "_", which abbreviations hold ("a.s", "c.m")
            hidden = CENSOR if length > 1 else GRAWLIX
            if end in layer_of:
                out.append((start, layer_of[end], (hidden, length, "")))
            elif end in inside:  # the run hides the first letter of a double: its second is read alone ("p**sy")
                out.append((start, inside[end] + 1, (hidden, length, runs[inside[end]][0])))
        return out

    def _plain(self, first: int, text: str, spaced: bool) -> list[int]:
        """A chain reading the plain term (in a spaced view, a double's second letter as the stretch mark):
        ``plain[k]`` has read its first ``k`` characters; ``[]`` for a term with a run of four or more of one
        letter (no rule-made form then)."""
        symbols = form_symbols(text, spaced)
        if len(symbols) != len(text):
            return []
        plain = [first] + [self._new() for _ in text]
        for k, symbol in enumerate(symbols):
            self._reader(plain[k], symbol, plain[k + 1])
        return plain

    def _edited(self, plain: Sequence[int], end: int, text: str, spaced: bool, edited: Sequence[tuple[str, int]]
                ) -> None:
        """The one-edit forms of the plain term (a dropped or a swapped letter): nothing else obfuscated, so
        that the lexicon's check of the edited spelling holds. The plain chain (``plain[k]``: ``k`` characters
        read, no edit yet) and a second one, ``after[k]`` (the same with the edit made), share the work: each
        edit leads from the first to the second. In a spaced view the symbol of a letter depends on the one
        before it (``M`` for a double), so an edit is built only where it leaves the next symbol unchanged."""
        symbols = form_symbols(text, spaced)
        n = len(text)
        after = [self._new() for _ in range(n + 1)]
        for k in range(n):
            self._reader(after[k], symbols[k], after[k + 1])
        self.moves[after[n]].append((ALWAYS, end))

        def doubles(i: int, before: str) -> bool:  # does text[i] read as a stretch mark after ``before``?
            return spaced and text[i] == before

        for kind, i in edited:
            if kind == "drop":
                if i + 1 < n and doubles(i + 1, text[i]) != doubles(i + 1, text[i - 1]):
                    continue
                self.moves[plain[i]].append((ALWAYS, after[i + 1]))
            else:
                if i + 2 < n and doubles(i + 2, text[i + 1]) != doubles(i + 2, text[i]):
                    continue
                swapped = [text[i + 1], text[i]]
                second = STRETCH_MARK if spaced and swapped[1] == swapped[0] else swapped[1]
                first_symbol = STRETCH_MARK if doubles(i + 1, text[i - 1]) else swapped[0]
                self._chain(plain[i], [first_symbol, second], after[i + 2])
