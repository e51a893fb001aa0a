"""The normalised, flattened view of word lists that every matcher compiles from."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from guardrail.matching.normalize import normalize_term
from guardrail.wordlists.wordlist import MatchMode, WordList


@dataclass(frozen=True)
class TermSpec:
    """One term of one word list, normalised.

    Attributes:
        term_id: index in the flattened term table (stable for a given word-list content).
        list_name: the word list it comes from (metrics label, events).
        text: the term as written in the list.
        normalized: ``text`` after :func:`guardrail.matching.normalize.normalize_term`.
        match: ``word`` | ``prefix`` | ``substring``.
        case_sensitive: compared without case folding.
    """

    term_id: int
    list_name: str
    text: str
    normalized: str
    match: MatchMode
    case_sensitive: bool


@dataclass(frozen=True)
class AllowSpec:
    """An allow-term: a substring-mode match lying inside an occurrence of it is not a match."""

    text: str
    normalized: str
    case_sensitive: bool


def flatten(wordlists: Sequence[WordList]) -> tuple[tuple[TermSpec, ...], tuple[AllowSpec, ...]]:
    """Flatten word lists into term and allow-term tables, in list order then term order.

    Allow-terms are registered in both case modes so that they cover case-sensitive and
    case-insensitive substring terms alike (they apply to every list compiled alongside them).
    """
    terms: list[TermSpec] = []
    for wordlist in wordlists:
        for term in wordlist.terms:
            norm = normalize_term(term.text, term.case_sensitive)
            terms.append(TermSpec(len(terms), wordlist.name, term.text, norm, MatchMode(term.match),
                                  term.case_sensitive))
    return tuple(terms), flatten_allows(wordlists)


def flatten_allows(wordlists: Sequence[WordList]) -> tuple[AllowSpec, ...]:
    """The allow-terms of ``wordlists``, deduplicated, in both case modes (see :func:`flatten`)."""
    allows: dict[tuple[str, bool], AllowSpec] = {}
    for wordlist in wordlists:
        for text in wordlist.allow:
            for case_sensitive in (False, True):
                norm = normalize_term(text, case_sensitive)
                if norm:
                    allows.setdefault((norm, case_sensitive), AllowSpec(text, norm, case_sensitive))
    return tuple(allows.values())
