"""Which of the rule-made forms a term gets: the decisions that depend on data, apart from the automaton.

The NFA (:mod:`guardrail.matching.obfuscation.nfa`) reads the forms every term of a level gets through
character classes (leet, look-alike letters, one censor character, separators, stretched letters). The
rules here add forms that would, for some terms, spell something else, so each is checked before it is
added:

- **doubled letter** (``spaced``): a letter the term has once written twice (``suuck``, ``biitch``,
  ``bastarrd``) — unless the doubled spelling is a real word (``annal`` for ``anal``, ``rapping`` for
  ``raping``; for a ``prefix`` term, unless a real word begins with it);
- **one real letter** (``leet``): a three-letter term with two of its letters in leetspeak (``4ss``, ``a$$``)
  — unless the form has two digits or more (a number or a model number: ``45s``, ``A55``, ``B52``) or is a
  real word;
- **censor runs** (``masked``): a run of censor characters for two or more letters, not the first (``f**k``,
  ``b***h``, ``f***``), or the one inner letter of a three-letter term (``f*g``; not with ``.`` ``-`` ``_``,
  which abbreviations hold: ``a.s``), where exactly one term of the stream fits the visible letters and the
  length (never the first letter: ``*`` is also markdown, which the markup view reads through); a run that
  reaches the end must cover three letters or more (``a**`` is also the end of markdown bold, ``**plan a**``);
- **a one-letter word beside a spaced form** (``spaced``): ``a f u c k``, ``s h i t a lot`` — unless the
  letter and the term spell a real word together (``a m o n g`` is not ``a`` + ``mong``);
- **one edit** (``masked``): one letter dropped, never the first or the last (``masturbaton``, ``bastrd``,
  ``pusy``, ``bolocks``), or two neighbours swapped, the last two included (``fcuk``, ``fukc``), in a term of
  :data:`MIN_EDIT_LETTERS` letters or more — unless the result is a real word (``bestiality`` for
  ``beastiality``), becomes one with a doubled letter, begins like common words with an edit in its first
  :data:`EDIT_KEEPS` letters, or is another term of the stream.

"Real word" is :func:`~guardrail.matching.obfuscation.lexicon.lexicon` (a dictionary plus the most frequent
words of the bundled lists' languages; ``scripts/gen_lexicon.py``), so the exceptions come from data.
Measured cost and what each rule leaves: docs/matching.md, "What people type".
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

from guardrail.matching.obfuscation import CENSOR_CHARS, ONE_LETTER_WORDS, data
from guardrail.matching.obfuscation.lexicon import lexicon
from guardrail.wordlists.wordlist import MatchMode

#: An edit at or after this letter leaves the term's beginning as it is, so the form adds no new beginning that
#: ordinary words share; an edit before it is kept only if the form does not begin like one of the
#: :data:`COMMON_BEGINNINGS` most frequent English words ("theesome" for "threesome" would begin like "the",
#: and the decoder would hold back every "the": bench/obfuscation.py, costs, extra hold-back on plain prose).
EDIT_KEEPS = 3
COMMON_BEGINNINGS = 2000
#: Terms with at least this many letters get one-edit forms: shorter ones have too many real-word
#: neighbours (``rape`` → ``rap``, ``tape``…) for a dictionary to sort them out.
MIN_EDIT_LETTERS = 4
#: A censor run that ends the form covers at least this many letters (``f***``, not ``a**``: markdown bold ends
#: the same way, ``**plan a**``).
MIN_END_CENSOR_RUN = 3


def is_real_word(form: str, match: MatchMode) -> bool:
    """Whether ``form`` (lower-case letters) is a word of the lexicon, or, for a ``prefix`` term, begins one."""
    words = lexicon()
    return words.begins_a_word(form) if match is MatchMode.PREFIX else form in words


def doubling_positions(term: str, match: MatchMode) -> frozenset[int]:
    """Indices of the letters of ``term`` (normalised, homoglyph-folded) that may be written twice.

    Only a letter the term has once (not beside the same letter) qualifies, and only where the doubled
    spelling is not a real word (:func:`is_real_word`).
    """
    allowed = set()
    for i, c in enumerate(term):
        if not c.isalpha() or (i and term[i - 1] == c) or (i + 1 < len(term) and term[i + 1] == c):
            continue
        if not is_real_word(term[:i + 1] + term[i:], match):
            allowed.add(i)
    return frozenset(allowed)


def one_real_letter_forms(term: str, match: MatchMode) -> tuple[str, ...]:
    """Leet forms of a three-letter ``term`` that keep one real letter or one run of it (``a$$``, ``4ss``,
    ``@ss``: the doubled ``s`` is one letter stretched), minus forms with two digits or more (they read as a
    number or a model number: ``45s``, ``a55``) and real words; ``()`` for other terms. (Forms with two real
    letters are the level's own: the NFA reads them through its leet classes.)"""
    if len(term) != 3 or not term.isalpha() or not term.isascii():
        return ()
    leet = data().leet
    forms: set[str] = {""}
    for c in term:
        forms = {f + x for f in forms for x in c + leet.get(c, "")}
    kept = []
    for form in sorted(forms):
        real = [i for i, c in enumerate(form) if c == term[i]]
        runs = sum(1 for i in real if not (i and i - 1 in real and term[i - 1] == term[i]))
        numeric = sum(c.isdigit() for c in form) >= 2  # reads as a number or a model number: 45s, a55, S8
        if real and runs < 2 and not numeric and not is_real_word(form, match):
            kept.append(form)
    return tuple(kept)


def censor_runs(terms: Sequence[str]) -> list[tuple[tuple[int, int], ...]]:
    """Per term, the ``(start, length)`` censor runs it may be written with (module docstring): the first
    letter kept, ``length`` letters from ``start`` hidden, and no other term of ``terms`` of the same length with
    the same visible letters (counting each distinct term once)."""
    distinct = sorted(set(terms))
    signatures: Counter[tuple[str, int, int]] = Counter()

    def runs_of(term: str) -> list[tuple[int, int]]:
        n = len(term)
        if n < 3 or not term.isalpha():
            return []
        found = [(start, length) for start in range(1, n) for length in range(2, n - start + 1)
                 if start + length < n or length >= MIN_END_CENSOR_RUN]
        if n == 3:  # a short term's one inner letter (f*g): the single censor rule needs four letters
            found.append((1, 1))
        return found

    def signature(term: str, start: int, length: int) -> tuple[str, int, int]:
        return (term[:start] + "\0" + term[start + length:], start, length)

    for term in distinct:
        for start, length in runs_of(term):
            signatures[signature(term, start, length)] += 1
    return [tuple((s, k) for s, k in runs_of(term) if signatures[signature(term, s, k)] == 1) for term in terms]


def edits(term: str, match: MatchMode, others: frozenset[str] = frozenset()) -> tuple[tuple[str, int], ...]:
    """One-edit forms of a long ``term`` as ``(kind, i)``: ``("drop", i)`` drops letter ``i``, ``("swap", i)``
    swaps letters ``i`` and ``i + 1``, the last two included (``fukc``); the first letter stays and the last is
    never dropped (readers rely on a word's ends); an edit in the first :data:`EDIT_KEEPS` letters only where
    the form does not begin like common words; minus forms that are real words (also with one letter doubled)
    or one of the stream's other terms (``others``); ``()`` for terms under :data:`MIN_EDIT_LETTERS` letters."""
    if len(term) < MIN_EDIT_LETTERS or not term.isalpha():
        return ()
    found: list[tuple[str, tuple[str, int]]] = []
    for i in range(1, len(term) - 1):
        found.append((term[:i] + term[i + 1:], ("drop", i)))
    # Inner neighbours, and the last two letters: an adjacent transposition is one of the four single errors
    # behind most misspellings (Damerau 1964), and a deliberate spelling too ("fukc", "shti").
    for i in range(1, len(term) - 1):
        found.append((term[:i] + term[i + 1] + term[i] + term[i + 2:], ("swap", i)))
    # An edit near the start must not make the form begin like ordinary text ("theesome" for "threesome"
    # begins like "the"): the decoder would hold back every "the" it writes (bench/obfuscation.py, costs).
    usual = lexicon().common_beginnings(COMMON_BEGINNINGS)
    found = [(form, (kind, i)) for form, (kind, i) in found
             if i >= EDIT_KEEPS or form[:i + 1] not in usual]
    # Every edit that spells an allowed form (dropping either letter of a double gives one form; the NFA of a
    # spaced view can build only one of them). A form that a doubled letter turns into a real word is left out
    # too: the automaton reads doubled letters after an edit ("fiting" for "fisting" would read "fitting").
    return tuple(edit for form, edit in found if form != term and form not in others and not is_real_word(form, match)
                 and not any(form[:i + 1] + form[i:] != term and is_real_word(form[:i + 1] + form[i:], match)
                             for i in range(len(form)))
                 and (len(form) > 3 or any(c in VOWELS for c in form)))


#: A three-letter edited form needs a vowel: without one it reads as an abbreviation or a model number (``clt``,
#: ``sht``, ``smt``); with one as a spelling (``fuk``). Latin, Greek and Cyrillic vowels.
VOWELS = frozenset("aeiouyαεηιοωυаеёиоуыэюяіїє")


def edit_spellings(term: str, edited: Sequence[tuple[str, int]]) -> tuple[str, ...]:
    """The strings the edits of :func:`edits` spell, in order, without repeats."""
    out = []
    for kind, i in edited:
        out.append(term[:i] + term[i + 1:] if kind == "drop" else term[:i] + term[i + 1] + term[i] + term[i + 2:])
    return tuple(dict.fromkeys(out))


def edit_forms(term: str, match: MatchMode, others: frozenset[str] = frozenset()) -> tuple[str, ...]:
    """The one-edit forms of ``term`` (:func:`edits`) as strings (for reports and tests)."""
    return edit_spellings(term, edits(term, match, others))


def joined_letters(terms: Sequence[tuple[str, MatchMode]], edited: Sequence[Sequence[str]] = ()
                   ) -> list[tuple[str, str]]:
    """Per term ``(before, after)``: the single letters or digits a spaced run may hold before the term
    (``a f u c k``) and after it (``s h i t a``): those that do not spell a common English word with it, also
    with one of its doubled letters, and also with a letter on each side (``a`` + ``mong`` is ``among``, ``e`` +
    ``ssex`` is ``essex``, ``d`` + ``rape`` + ``r`` is ``draper``; common words: a spaced ``a c o c k`` is "a
    cock", though a dictionary has the archaic ``acock``; English: ``b a s t a r d I`` is not Italian
    ``bastardi``). For a ``prefix`` term only the left side counts, and no common English word may begin with
    the letter and the term.

    ``terms``: the normalised text and match mode of each; ``edited``: per term, its one-edit forms, which take
    the letters beside them too. Lookups in the lexicon's indexes of common words (``Lexicon.common_cuts``).
    """
    spellings = [[term] + [term[:i + 1] + term[i:] for i in sorted(doubling_positions(term, match))]
                 + [v for f in (edited[k] if edited else ()) for v in (f, *(f[:i + 1] + f[i:] for i in range(len(f))))]
                 for k, (term, match) in enumerate(terms)]
    after_first, before_last, middles = lexicon().common_cuts
    letters = sorted(ONE_LETTER_WORDS)
    out = []
    for (_, match), vs in zip(terms, spellings):
        banned_before: set[str] = set()
        banned_after: set[str] = set()
        for v in vs:
            if match is MatchMode.PREFIX:  # no common word may begin with the letter and the term
                banned_before |= lexicon().first_letters_before(v)
                continue
            banned_before |= after_first.get(v, set())
            banned_after |= before_last.get(v, set())
            for x, y in middles.get(v, ()):  # a letter on each side must not spell one either ("d r a p e r")
                banned_before.add(x)
                banned_after.add(y)
        out.append(("".join(x for x in letters if x not in banned_before),
                    "" if match is not MatchMode.WORD else "".join(y for y in letters if y not in banned_after)))
    return out


def censor_class() -> str:
    """The censor characters, sorted (one place for the NFA's class)."""
    return "".join(sorted(CENSOR_CHARS))
