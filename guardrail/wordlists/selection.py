"""Turn user-facing selections (``--wordlist en,de``, ``--banned "a,b"``) into word lists."""

from __future__ import annotations

from collections.abc import Iterable

from guardrail.wordlists.regex_syntax import REGEX_PREFIX
from guardrail.wordlists.wordlist import WordList, bundled_wordlist, load_wordlist, wordlist_from_terms


def split_names(values: Iterable[str]) -> list[str]:
    """Flatten repeated and comma-separated values, dropping blanks and duplicates (order kept)."""
    names: list[str] = []
    for value in values:
        for name in value.split(","):
            name = name.strip()
            if name and name not in names:
                names.append(name)
    return names


def split_terms(values: Iterable[str]) -> list[str]:
    """As :func:`split_names`, except that a term starting with ``re:`` takes the rest of its value, commas
    included (``--banned "sorry,re:s[o0]r{1,2}y"`` is two terms: a pattern's ``{m,n}`` holds a comma)."""
    terms: list[str] = []
    for value in values:
        pieces = value.split(",")
        for at, piece in enumerate(pieces):
            term = piece.strip()
            if term.startswith(REGEX_PREFIX):
                term = ",".join(pieces[at:]).strip()
            if term and term not in terms:
                terms.append(term)
            if term.startswith(REGEX_PREFIX):
                break
    return terms


def select_wordlists(names: Iterable[str], banned_terms: Iterable[str] = ()) -> list[WordList]:
    """Bundled lists by name (or ``.txt`` paths), plus a ``request`` list of ad-hoc banned terms.

    Raises:
        WordListError: for an unknown list name, a malformed list file or an invalid banned term.
    """
    lists = [load_wordlist(name) if name.endswith(".txt") else bundled_wordlist(name) for name in split_names(names)]
    extra = split_terms(banned_terms)
    if extra:
        lists.append(wordlist_from_terms(extra, name="request"))
    return lists
