"""Thompson NFA of rewritten regex patterns, with word-boundary assertions as conditional epsilon moves.

Built from the parse trees of :func:`guardrail.matching.regex.term.normalize_pattern` (which accepts only
literals, ``.``, classes, groups, alternation, ``{m,n}``, ``\\b`` and ``\\B``). Bounded repetition is
unrolled (``x{1,3}`` = ``x(?:x(?:x)?)?``), so the NFA has no cycle and every path from a start to an
accept state reads at most ``MAX_REGEX_SPAN`` characters.

Zero-width assertions are epsilon moves taken only in the right *context*: whether the character before
the position and the one after it are word characters (the text's edges count as non-word, as for ``\\b``
in Python). Besides ``\\b`` and ``\\B`` there is the match mode's *edge* assertion ("not inside a word":
not word characters on both sides), put at both ends of a ``word`` term and at the start of a ``prefix``
term (docs/matching.md). The closure of a state is therefore computed per context
(:meth:`Nfa.closure`), as RE2's DFA does for its empty-width flags (Cox, "Regular Expression Matching in
the Wild", 2010).
"""

from __future__ import annotations

from collections.abc import MutableSequence, Sequence
from re import _constants as sre  # type: ignore[attr-defined]

from guardrail.matching.charset import CharSet, digit_chars, space_chars, word_chars
from guardrail.wordlists.regex_syntax import RegexError, parse_regex
from guardrail.wordlists.wordlist import MatchMode

#: NFA states one regex term may unroll to. The NFA's size bounds the work per character of the lazy
#: determinisation and of the compile-time exploration (:mod:`guardrail.matching.regex.automaton`);
#: a pattern of 256 characters with bounded repetitions stays far below it unless repetitions nest
#: (``(?:a|b|c){1,100}`` unrolls to ~1,000 states; a class ``[abc]{1,100}`` to 200).
MAX_REGEX_NFA_STATES = 4096

#: Epsilon-move conditions. A context is ``2 * previous_is_word + next_is_word``. ``AFTER_NONWORD`` and
#: ``BEFORE_NONWORD`` (the previous / the next character is not a word character) are the edges of an
#: obfuscated form (:mod:`guardrail.matching.obfuscation.nfa`), whose first or last character may be a symbol.
ALWAYS, BOUNDARY, NOT_BOUNDARY, EDGE, AFTER_NONWORD, BEFORE_NONWORD = range(6)

_CATEGORY_SETS = {
    sre.CATEGORY_WORD: (word_chars, False), sre.CATEGORY_NOT_WORD: (word_chars, True),
    sre.CATEGORY_DIGIT: (digit_chars, False), sre.CATEGORY_NOT_DIGIT: (digit_chars, True),
    sre.CATEGORY_SPACE: (space_chars, False), sre.CATEGORY_NOT_SPACE: (space_chars, True),
}


def holds(condition: int, context: int) -> bool:
    """Whether an epsilon move of ``condition`` may be taken in ``context`` (see :data:`ALWAYS`)."""
    previous_word, next_word = bool(context & 2), bool(context & 1)
    if condition == BOUNDARY:
        return previous_word != next_word
    if condition == NOT_BOUNDARY:
        return previous_word == next_word
    if condition == EDGE:
        return not (previous_word and next_word)
    if condition == AFTER_NONWORD:
        return not previous_word
    if condition == BEFORE_NONWORD:
        return not next_word
    return True


def unrolled_size(items: list[tuple]) -> int:
    """NFA states :class:`Nfa` creates for a parse tree (an upper bound, computed before building)."""
    size = 0
    for op, av in items:
        if op in (sre.LITERAL, sre.NOT_LITERAL, sre.ANY, sre.IN):
            size += 2
        elif op is sre.BRANCH:
            size += 1 + sum(1 + unrolled_size(list(alt)) for alt in av[1])
        elif op is sre.SUBPATTERN:
            size += unrolled_size(list(av[3]))
        elif op in (sre.MAX_REPEAT, sre.MIN_REPEAT):
            size += 1 + av[1] * unrolled_size(list(av[2]))
        elif op is sre.AT:
            size += 1
    return size


def charset_of(op, av) -> CharSet:
    """The characters one position of a rewritten pattern accepts (``LITERAL``, ``NOT_LITERAL``, ``ANY``,
    ``IN``); ``.`` is everything but ``\\n`` as in Python (normalised text holds no ``\\n`` anyway)."""
    if op is sre.LITERAL:
        return CharSet(((av, av),))
    if op is sre.NOT_LITERAL:
        return CharSet(((av, av),)).complement()
    if op is sre.ANY:
        return CharSet(((10, 10),)).complement()
    parts: list[CharSet] = []
    negate = False
    for item_op, item in av:
        if item_op is sre.NEGATE:
            negate = True
        elif item_op is sre.LITERAL:
            parts.append(CharSet(((item, item),)))
        elif item_op is sre.RANGE:
            parts.append(CharSet(((item[0], item[1]),)))
        elif item_op is sre.CATEGORY:
            make, complement = _CATEGORY_SETS[item]
            parts.append(make().complement() if complement else make())
    union = CharSet.union(*parts)
    return union.complement() if negate else union


class Nfa:
    """The union NFA of several regex terms (one start and one accept state each).

    Args:
        patterns: per term (index = local term id), its rewritten pattern and match mode.

    Attributes:
        charsets: the distinct character sets, indexed by ``consumes``.
        consumes: per state, the index of the set it reads, or -1 (a state reads one character or none).
        target: per consuming state, the state after the character.
        moves: per state, its epsilon moves ``(condition, state)``.
        accepts: per state, the term it completes, or -1.
        starts: per term, its start state.

    Raises:
        RegexError: a term unrolls to more than :data:`MAX_REGEX_NFA_STATES` states (``construct``
            ``"automaton size"``).
    """

    def __init__(self, patterns: Sequence[tuple[str, MatchMode]]):
        self._start_empty()
        for term, (normalized, match) in enumerate(patterns):
            items = parse_regex(normalized)
            size = unrolled_size(items) + 3
            if size > MAX_REGEX_NFA_STATES:
                raise RegexError("automaton size", f"the pattern unrolls to {size} automaton states (limit "
                                 f"{MAX_REGEX_NFA_STATES}): repetitions of alternations multiply; use classes "
                                 "([abc] rather than (?:a|b|c)) or smaller bounds")
            start = cur = self._new()
            if match is not MatchMode.SUBSTRING:
                cur = self._move(cur, EDGE)
            cur = self._build(items, cur)
            if match is MatchMode.WORD:
                cur = self._move(cur, EDGE)
            self.accepts[cur] = term
            self.starts.append(start)

    def _start_empty(self) -> None:
        """No state yet (what a builder of another NFA calls first: ``ObfuscationNfa``)."""
        self.charsets: list[CharSet] = []
        self._charset_ids: dict[CharSet, int] = {}
        self.consumes: MutableSequence[int] = []
        self.target: MutableSequence[int] = []
        self.moves: list[list[tuple[int, int]]] = []
        self.accepts: MutableSequence[int] = []
        self.starts: MutableSequence[int] = []
        self._closures: dict[int, tuple[tuple[int, ...], tuple[int, ...]]] = {}

    @property
    def num_states(self) -> int:
        return len(self.consumes)

    def _new(self) -> int:
        self.consumes.append(-1)
        self.target.append(-1)
        self.moves.append([])
        self.accepts.append(-1)
        return len(self.consumes) - 1

    def _move(self, source: int, condition: int = ALWAYS) -> int:
        state = self._new()
        self.moves[source].append((condition, state))
        return state

    def _build(self, items: list[tuple], cur: int) -> int:
        """Append the states reading ``items`` after ``cur``; returns the state after them."""
        for op, av in items:
            if op in (sre.LITERAL, sre.NOT_LITERAL, sre.ANY, sre.IN):
                reader = self._move(cur)
                charset = charset_of(op, av)
                self.consumes[reader] = self._charset_ids.setdefault(charset, len(self.charsets))
                if self.consumes[reader] == len(self.charsets):
                    self.charsets.append(charset)
                cur = self.target[reader] = self._new()
            elif op is sre.BRANCH:
                end = self._new()
                for alternative in av[1]:
                    self.moves[self._build(list(alternative), self._move(cur))].append((ALWAYS, end))
                cur = end
            elif op is sre.SUBPATTERN:
                cur = self._build(list(av[3]), cur)
            elif op in (sre.MAX_REPEAT, sre.MIN_REPEAT):  # lazy or greedy: the same set of matches
                low, high, sub = av
                for _ in range(low):
                    cur = self._build(list(sub), cur)
                if high > low:
                    end = self._new()
                    for _ in range(high - low):
                        self.moves[cur].append((ALWAYS, end))
                        cur = self._build(list(sub), cur)
                    self.moves[cur].append((ALWAYS, end))
                    cur = end
            elif op is sre.AT:
                cur = self._move(cur, BOUNDARY if av is sre.AT_BOUNDARY else NOT_BOUNDARY)
            else:
                raise RegexError(str(op), f"the construct {op} is not supported")
        return cur

    def closure(self, state: int, context: int) -> tuple[tuple[int, ...], tuple[int, ...]]:
        """``(consuming states, completed terms)`` reachable from ``state`` by epsilon moves in ``context``
        (sorted; memoised)."""
        key = state * 4 + context
        found = self._closures.get(key)
        if found is None:
            consuming, completed, seen, stack = set(), set(), {state}, [state]
            while stack:
                here = stack.pop()
                if self.consumes[here] >= 0:
                    consuming.add(here)
                if self.accepts[here] >= 0:
                    completed.add(self.accepts[here])
                for condition, nxt in self.moves[here]:
                    if nxt not in seen and holds(condition, context):
                        seen.add(nxt)
                        stack.append(nxt)
            found = self._closures[key] = (tuple(sorted(consuming)), tuple(sorted(completed)))
        return found
