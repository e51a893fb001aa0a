"""The real words an obfuscation rule must not read as a term (``guardrail/matching/data/lexicon.marisa``).

A doubled letter, a dropped or swapped letter and a leet form with one real letter left are forms people
write for a term (``suuck``, ``masturbaton``, ``4ss``), but the same edit of some terms spells a real word
(``annal``, ``singer`` for ``swinger``, ``rapping`` for ``raping``). :mod:`guardrail.matching.obfuscation.forms`
gives a term only the forms that are not in this lexicon. Built by ``scripts/gen_lexicon.py`` from the English
dictionary the obfuscation benchmark uses and wordfreq's most frequent words of the bundled lists' languages
(its ``lexicon.json`` records the sources and versions); a ``marisa_trie.BytesTrie`` read by memory map, so
a process pays a few MB of page cache and no Python objects for its ~770k words. Each word is flagged as a
dictionary word, a common one (among the most frequent words of a language), or both.
"""

from __future__ import annotations

import functools
from pathlib import Path

import marisa_trie

LEXICON_PATH = Path(__file__).parent.parent / "data" / "lexicon.marisa"
#: Flag bits (``scripts/gen_lexicon.py``).
DICTIONARY, COMMON = 1, 2


class Lexicon:
    """Lower-case words (NFKC + casefold, letters only).

    Args:
        path: the trie file (``scripts/gen_lexicon.py``).

    Raises:
        OSError: the file cannot be read.
    """

    def __init__(self, path: Path = LEXICON_PATH):
        self._trie = marisa_trie.BytesTrie()
        self._trie.mmap(str(path))

    def __contains__(self, word: object) -> bool:
        return isinstance(word, str) and word in self._trie

    def is_common(self, word: str) -> bool:
        """Whether ``word`` is among the most frequent words of a language (what people write)."""
        return any(flags[0] & COMMON for flags in self._trie.get(word, ()))

    def begins_a_word(self, prefix: str, common: bool = False) -> bool:
        """Whether some word (a common one, when ``common``) starts with ``prefix`` (itself included): what a
        ``prefix`` term's form must not do."""
        if not common:
            return next(self._trie.iterkeys(prefix), None) is not None
        return any(flags[0] & COMMON for _, flags in self._trie.iteritems(prefix))

    def __len__(self) -> int:
        return len(self._trie)


@functools.cache
def lexicon() -> Lexicon:
    """The bundled lexicon, opened once per process."""
    return Lexicon()
