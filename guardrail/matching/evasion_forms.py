"""Visible evasions of a term in text: the glued, underscore-joined and one-edit forms a reader still sees.

The matching contract (:mod:`guardrail.matching.textmatch`) says when a term *is* in a text; this module
says when a text holds a form of the term that the contract does not call a match but a reader recognises.
It is the independent, text-level verifier of the evasion guard (tests) and what ``bench/decode.py``
counts as *visible evasions*. It never runs in the decoder.

Per term (normalised as the contract does: NFKC, case folding unless case-sensitive, whitespace runs
collapsed), with ``letters`` = the term's letters and digits in order ("thank you" → "thankyou"), every
maximal run of word characters (``\\w``: letters, digits, ``_``) in the normalised text is classified:

========== ===================================================================================== ==============
kind       the run                                                                               example
========== ===================================================================================== ==============
glued      contains the term (or ``letters``) next to another letter or digit, or *is*            "whattalk",
           ``letters`` of a multi-word term                                                       "TALKMaster",
                                                                                                   "thankyou"
underscore contains ``letters`` once its underscores are removed, with an ``_`` at or inside it   "STUPID_stiform",
                                                                                                   "thank_you"
edit       (terms of at least ``edit_min_chars`` letters) the run without underscores is one        "SOORY" [sorry]
           edit from ``letters``: insert, delete, substitute, or swap two neighbours
========== ===================================================================================== ==============

A run equal to a one-word term is a contract match (a leak, :class:`TextMatcher`'s business), not an
evasion. A multi-word term glued on its outer edges ("xthank you") is found as ``glued`` too.

Not flagged: terms shorter than ``min_chars`` letters (they hide inside innocent words: "no" in "not"),
spaced-out or punctuated letters ("s o r r y", "thank-you" is two runs), two or more edits, a one-edit
form glued to other letters ("SOORYfor"), homoglyphs that NFKC does not fold. A one-edit form may be a
real word ("worry" for "sorry"): callers that count evasions pass such words in ``ignore``.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Sequence
from dataclasses import dataclass
from typing import Literal

from guardrail.matching.normalize import is_word_char, normalize_with_offsets
from guardrail.matching.term_spec import TermSpec

EvasionKind = Literal["glued", "underscore", "edit"]
#: Terms with fewer letters are not checked: they hide inside innocent words ("no" in "not").
MIN_CHARS = 4
#: One-edit forms are checked for terms with at least this many letters (shorter ones have too many
#: innocent neighbours: "help" / "held", "hell", "heap").
EDIT_MIN_CHARS = 5


@dataclass(frozen=True)
class EvasionForm:
    """A visible form of a banned term.

    Attributes:
        term: the term as written in its list.
        kind: ``glued``, ``underscore`` or ``edit`` (see the module docstring).
        text: the run of the original text holding the form ("TALKMaster").
        start, end: offsets of that run in the original text (end exclusive).
    """

    term: str
    kind: EvasionKind
    text: str
    start: int
    end: int


def one_edit(a: str, b: str) -> bool:
    """Whether ``a`` and ``b`` differ by exactly one insertion, deletion, substitution or swap of two
    neighbouring characters (optimal-string-alignment distance 1)."""
    if a == b or abs(len(a) - len(b)) > 1:
        return False
    if len(a) > len(b):
        a, b = b, a
    i = 0
    while i < len(a) and a[i] == b[i]:
        i += 1
    if len(a) < len(b):  # one insertion into a
        return a[i:] == b[i + 1:]
    if a[i + 1:] == b[i + 1:]:  # one substitution
        return True
    return i + 1 < len(a) and a[i] == b[i + 1] and a[i + 1] == b[i] and a[i + 2:] == b[i + 2:]


def _runs(norm: str) -> Iterable[tuple[int, int]]:
    """``(start, end)`` of every maximal run of word characters in ``norm``."""
    start = None
    for index, char in enumerate(norm):
        if is_word_char(char):
            if start is None:
                start = index
        elif start is not None:
            yield start, index
            start = None
    if start is not None:
        yield start, len(norm)


def _classify(run: str, normalized: str, letters: str, single_word: bool, edits: bool) -> EvasionKind | None:
    if single_word and run == normalized:
        return None  # a contract match, not an evasion
    squashed = run.replace("_", "")
    if single_word:
        at = run.find(normalized)
        while at >= 0:
            end = at + len(normalized)
            if (at and run[at - 1] == "_") or (end < len(run) and run[end] == "_"):
                return "underscore"
            at = run.find(normalized, at + 1)
        if normalized in run:
            return "glued"
    if letters in squashed:
        if "_" in run:
            return "underscore"
        return "glued"
    if edits and one_edit(squashed, letters):
        return "edit"
    return None


def find_evasions(text: str, terms: Sequence[TermSpec], *, min_chars: int = MIN_CHARS,
                  edit_min_chars: int | None = EDIT_MIN_CHARS, ignore: Collection[str] = ()) -> list[EvasionForm]:
    """The visible evasions of ``terms`` in ``text`` (see the module docstring), sorted by position.

    Args:
        text: any text (an answer).
        terms: the terms (:func:`guardrail.matching.term_spec.flatten` of the word lists).
        min_chars: terms with fewer letters are skipped.
        edit_min_chars: one-edit forms are checked for terms with at least this many letters; ``None``: never.
        ignore: case-folded runs never reported (real words one edit from a term: "worry" for "sorry").
    """
    found: set[EvasionForm] = set()
    for spec in terms:
        letters = "".join(c for c in spec.normalized if c.isalnum())
        if len(letters) < min_chars:
            continue
        norm, offsets = normalize_with_offsets(text, spec.case_sensitive)
        single_word = all(is_word_char(c) for c in spec.normalized)
        edits = edit_min_chars is not None and len(letters) >= edit_min_chars
        spans: list[tuple[int, int, EvasionKind]] = []
        for start, end in _runs(norm):
            kind = _classify(norm[start:end], spec.normalized, letters, single_word, edits)
            if kind is not None and norm[start:end].casefold() not in ignore:
                spans.append((start, end, kind))
        if not single_word:  # a multi-word term glued on an outer edge: "xthank you", "thank youx"
            at = norm.find(spec.normalized)
            while at >= 0:
                end = at + len(spec.normalized)
                left = at > 0 and is_word_char(norm[at - 1]) and is_word_char(spec.normalized[0])
                right = end < len(norm) and is_word_char(norm[end]) and is_word_char(spec.normalized[-1])
                if left or right:
                    edge = norm[at - 1] if left else norm[end]
                    spans.append((at, end, "underscore" if edge == "_" else "glued"))
                at = norm.find(spec.normalized, at + 1)
        for start, end, kind in spans:
            first, last = offsets[start], offsets[end - 1] + 1
            found.add(EvasionForm(spec.text, kind, text[first:last], first, last))
    return sorted(found, key=lambda f: (f.start, f.end, f.term, f.kind))
