"""The normalised, flattened view of word lists that every matcher compiles from."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from guardrail.matching.normalize import normalize_term
from guardrail.matching.obfuscation import OFF, Obfuscation, effective
from guardrail.matching.regex.term import normalize_pattern
from guardrail.wordlists.regex_syntax import RegexError
from guardrail.wordlists.wordlist import MatchMode, Term, WordList, WordListError, written_term


@dataclass(frozen=True)
class TermSpec:
    """One term of one word list, normalised.

    Attributes:
        term_id: index in the flattened term table (stable for a given word-list content).
        list_name: the word list it comes from (metrics label, events).
        text: the term as written in a request (:func:`~guardrail.wordlists.wordlist.written_term`): a regex
            term with its ``re:`` prefix, a literal text that would read as one with a backslash (``\\re:x``),
            so that reports tell them apart; any other term as written in its list.
        normalized: ``text`` after :func:`guardrail.matching.normalize.normalize_term`; for a regex term the
            pattern over normalised text (:func:`guardrail.matching.regex.term.normalize_pattern`).
        match: ``word`` | ``prefix`` | ``substring``.
        case_sensitive: compared without case folding.
        regex: a regular-expression term.
        obfuscation: the obfuscated forms it also matches: its effective level (the term's own option, else
            its list's; ``off`` for regex, case-sensitive and ``substring`` terms and for the terms
            :func:`~guardrail.matching.obfuscation.effective` exempts).
    """

    term_id: int
    list_name: str
    text: str
    normalized: str
    match: MatchMode
    case_sensitive: bool
    regex: bool = False
    obfuscation: Obfuscation = OFF


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

    Raises:
        WordListError: a regex term outside the supported subset (naming the list and the term; the
            pattern is checked again here since a :class:`~guardrail.wordlists.wordlist.WordList` can be
            built without parsing).
    """
    terms: list[TermSpec] = []
    for wordlist in wordlists:
        for term in wordlist.terms:
            terms.append(term_spec(len(terms), wordlist.name, term, wordlist.obfuscation))
    return tuple(terms), flatten_allows(wordlists)


def term_spec(term_id: int, list_name: str, term: Term, list_obfuscation: Obfuscation | None = None) -> TermSpec:
    """The normalised entry of ``term`` (see :class:`TermSpec`); ``list_obfuscation`` is its list's level.

    Raises:
        WordListError: as :func:`flatten`.
    """
    written = written_term(term)
    if not term.regex:
        norm = normalize_term(term.text, term.case_sensitive)
        setting = term.obfuscation if term.obfuscation is not None else list_obfuscation
        level = OFF
        if setting is not None and not term.case_sensitive and MatchMode(term.match) is not MatchMode.SUBSTRING:
            level = effective(setting, norm)
        return TermSpec(term_id, list_name, written, norm, MatchMode(term.match), term.case_sensitive,
                        obfuscation=level)
    try:
        pattern = normalize_pattern(term.text, term.case_sensitive)
    except RegexError as exc:
        raise WordListError(f"term {written!r}: {exc.reason}", list_name) from None
    return TermSpec(term_id, list_name, written, pattern, MatchMode(term.match), term.case_sensitive, True)


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
