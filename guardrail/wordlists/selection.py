"""Turn user-facing selections (``--wordlist en,de``, ``--banned "a,b"``) into word lists."""

from __future__ import annotations

from collections.abc import Iterable

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


def select_wordlists(names: Iterable[str], banned: Iterable[str] = ()) -> list[WordList]:
    """Bundled lists by name (or ``.txt`` paths), plus a ``request`` list of ad-hoc banned terms.

    Raises:
        WordListError: for an unknown list name, a malformed list file or an invalid banned term.
    """
    lists = [load_wordlist(name) if name.endswith(".txt") else bundled_wordlist(name) for name in split_names(names)]
    extra = split_names(banned)
    if extra:
        lists.append(wordlist_from_terms(extra, name="request"))
    return lists
