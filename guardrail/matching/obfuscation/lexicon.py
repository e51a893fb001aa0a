"""The real words an obfuscation rule must not read as a term (``guardrail/matching/data/lexicon.marisa``).

A doubled letter, a dropped or swapped letter and a leet form with one real letter left are forms people
write for a term (``suuck``, ``masturbaton``, ``4ss``), but the same edit of some terms spells a real word
(``annal``, ``singer`` for ``swinger``, ``rapping`` for ``raping``). :mod:`guardrail.matching.obfuscation.forms`
gives a term only the forms that are not in this lexicon. Built by ``scripts/gen_lexicon.py`` from the English
dictionary the obfuscation benchmark uses and wordfreq's most frequent words of the bundled lists' languages
(its ``lexicon.json`` records the sources and versions); a ``marisa_trie.Trie`` read by memory map, so a
process pays a few MB of page cache and no Python objects for its ~770k words. Beside it, the common English
words (``common_en.txt``), for the rules that only matter for what people write.
"""

from __future__ import annotations

import bisect
import functools
from pathlib import Path

import marisa_trie

LEXICON_PATH = Path(__file__).parent.parent / "data" / "lexicon.marisa"
COMMON_EN_PATH = LEXICON_PATH.with_name("common_en.txt")
ACCENTED_PATH = LEXICON_PATH.with_name("accented.marisa")


class Lexicon:
    """Lower-case words (NFKC + casefold, letters only), and the common English ones among them.

    Args:
        path: the trie file (``scripts/gen_lexicon.py``).
        common_path: the common English words, one a line.
        accented_path: the accented real words by their spelling without accents.

    Raises:
        OSError: a file cannot be read.
    """

    def __init__(self, path: Path = LEXICON_PATH, common_path: Path = COMMON_EN_PATH,
                 accented_path: Path = ACCENTED_PATH):
        self._trie = marisa_trie.Trie()
        self._trie.mmap(str(path))
        self._accented = marisa_trie.BytesTrie()
        self._accented.mmap(str(accented_path))
        self._common_path = common_path

    def __contains__(self, word: object) -> bool:
        return isinstance(word, str) and word in self._trie

    def begins_a_word(self, prefix: str) -> bool:
        """Whether some word starts with ``prefix`` (itself included): what a ``prefix`` term's form must not
        do."""
        return next(self._trie.iterkeys(prefix), None) is not None

    @functools.cached_property
    def _common_ranked(self) -> list[str]:
        return self._common_path.read_text("utf-8").split()

    @functools.cached_property
    def common_english(self) -> frozenset[str]:
        """wordfreq's most frequent English words (~30k: a few MB, read on first use)."""
        return frozenset(self._common_ranked)

    @functools.cache  # noqa: B019 - one lexicon per process
    def common_beginnings(self, top: int) -> frozenset[str]:
        """Every beginning (prefix) of the ``top`` most frequent English words: text begins like these all the
        time, so a form that begins like one keeps text held back (``forms.edits``)."""
        return frozenset(w[:k] for w in self._common_ranked[:top] for k in range(1, len(w) + 1))

    @functools.cached_property
    def common_cuts(self) -> tuple[dict[str, set[str]], dict[str, set[str]], dict[str, set[tuple[str, str]]]]:
        """The common English words cut around a middle: ``w[1:]`` → first letters, ``w[:-1]`` → last letters,
        ``w[1:-1]`` → ``(first, last)`` pairs (what a letter beside a spaced form must not spell with it:
        ``forms.joined_letters``). Built once per process (~0.1 s)."""
        after_first: dict[str, set[str]] = {}
        before_last: dict[str, set[str]] = {}
        middles: dict[str, set[tuple[str, str]]] = {}
        for word in self.common_english:
            after_first.setdefault(word[1:], set()).add(word[0])
            before_last.setdefault(word[:-1], set()).add(word[-1])
            if len(word) > 2:
                middles.setdefault(word[1:-1], set()).add((word[0], word[-1]))
        return after_first, before_last, middles

    @functools.cached_property
    def _common_tails(self) -> list[str]:
        return sorted(w[1:] + "\0" + w[0] for w in self.common_english)

    def first_letters_before(self, prefix: str) -> set[str]:
        """The first letters of the common English words whose rest starts with ``prefix`` (``x`` for which
        ``x + prefix`` begins a common word)."""
        tails = self._common_tails
        found = set()
        for i in range(bisect.bisect_left(tails, prefix), len(tails)):
            if not tails[i].startswith(prefix):
                break
            found.add(tails[i][-1])
        return found

    def accented(self, plain: str) -> list[str]:
        """The real words spelled ``plain`` once their accents are off (``merde`` → ``merdé``)."""
        return [w for value in self._accented.get(plain, ()) for w in value.decode().split()]

    def __len__(self) -> int:
        return len(self._trie)


@functools.cache
def lexicon() -> Lexicon:
    """The bundled lexicon, opened once per process."""
    return Lexicon()
