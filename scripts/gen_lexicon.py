"""Regenerate ``guardrail/matching/data/lexicon.marisa``: the real words the obfuscation rules must not read as
terms (docs/matching.md, "What people type").

Some obfuscation rules would turn a real word into a term: a doubled letter (``annal`` for ``anal``,
``rapping`` for ``raping``), a dropped or swapped letter of a long term (``singer`` for ``swinger``,
``bestiality`` for ``beastiality``), one real letter kept in a short term (a model number like ``a55``). The
compiler asks this lexicon before it adds such a form to a term's automaton
(``guardrail/matching/obfuscation/forms.py``), so the exceptions come from data, not from a hand list.

Sources (every word lower-cased, NFKC + casefold like the matcher's text, letters only, 2 to 40 characters, each
also without its accents, as the homoglyph level reads it):

- the English dictionary the obfuscation benchmark uses (``bench/obfuscation.py: dictionary_words``):
  ``english-words``' ``web2`` and ``gcide`` sets, lemminflect's lexicon and the inflections of every entry;
- ``wordfreq``'s :data:`TOP_N` most frequent words of each language it covers among the bundled word lists'
  languages (:data:`LANGUAGES`), so that a list in another language gets its own real words as exceptions.

What is left out on purpose (``bench/obfuscation.py`` measures false positives on it as held-out data):
wordfreq's ranks beyond :data:`TOP_N`, and every word with a digit or a symbol.

The output is a ``marisa_trie.Trie`` of all of them (memory-mapped at run time: a few MB of disk, nearly no
memory), and ``common_en.txt``, wordfreq's :data:`TOP_N` most frequent English words (letters only, one a
line, most frequent first): a rule that only matters for what people write (a letter beside a spaced form:
``a c o c k`` is "a cock", though the dictionary has the archaic ``acock``; ``b a s t a r d I`` is not
Italian ``bastardi``) asks for those; and ``accented.marisa``, the real words with accents by their spelling
without (``merde`` → ``merdé``), so that an accented letter is not read as a term's plain one where that reads
a real word. All are deterministic for given package versions, and ``lexicon.json`` records them.

Usage: python scripts/gen_lexicon.py [--check]
"""

from __future__ import annotations

import argparse
import importlib.metadata
import json
import sys
import unicodedata
from pathlib import Path

import marisa_trie
import wordfreq

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))
from obfuscation import dictionary_words  # noqa: E402

OUTPUT = ROOT / "guardrail" / "matching" / "data" / "lexicon.marisa"
MANIFEST = OUTPUT.with_suffix(".json")
#: wordfreq's languages among the bundled lists' (``wordlists/*.txt``: eo, kab and tlh have no wordfreq data;
#: ``no`` is wordfreq's ``nb``).
LANGUAGES = ("ar", "cs", "da", "de", "en", "es", "fa", "fi", "fil", "fr", "hi", "hu", "it", "ja", "ko", "nb", "nl",
             "pl", "pt", "ru", "sv", "tr", "zh")
#: Most frequent words taken per language: below this rank wordfreq's lists hold the misspellings people
#: write (``fuckin``, ``shiit``), which are forms to catch, not words to spare.
TOP_N = 30_000


def fold(word: str) -> str:
    return unicodedata.normalize("NFKC", word).casefold()


COMMON_EN = OUTPUT.with_name("common_en.txt")
ACCENTED = OUTPUT.with_name("accented.marisa")


def _kept(word: str) -> bool:
    return 2 <= len(word) <= 40 and word.isalpha()


def strip_accents(word: str) -> str:
    """The word as the homoglyph level reads it: accents off (``gérer`` → ``gerer``)."""
    return "".join(c for c in unicodedata.normalize("NFD", word) if unicodedata.category(c) != "Mn")


def real_words() -> set[str]:
    found = {fold(w) for w in dictionary_words()}
    for language in LANGUAGES:
        found.update(fold(w) for w in wordfreq.top_n_list(language, TOP_N))
    return {w for w in found if _kept(w)}


def words(found: set[str]) -> list[str]:
    return sorted(found | {strip_accents(w) for w in found})  # a reader of the homoglyph level sees these too


def accented(found: set[str]) -> dict[str, list[str]]:
    """Accent-stripped spelling → the real words that spell it with accents (``merde`` → ``merdé``): an
    accented text letter reads as its base letter, except where that would read a real word as a term."""
    out: dict[str, list[str]] = {}
    for w in sorted(found):
        plain = strip_accents(w)
        if plain != w and len(plain) == len(w):
            out.setdefault(plain, []).append(w)
    return out


def common_english() -> list[str]:
    """The most frequent English words, most frequent first (a rule may take the top of the list)."""
    return list(dict.fromkeys(w for w in map(fold, wordfreq.top_n_list("en", TOP_N)) if _kept(w)))


def manifest(count: int) -> dict:
    versions = {name: importlib.metadata.version(name)
                for name in ("english-words", "lemminflect", "wordfreq", "marisa-trie")}
    return {"words": count, "top_n": TOP_N, "languages": list(LANGUAGES), "versions": versions,
            "source": "english-words web2+gcide, lemminflect lexicon and inflections, wordfreq top_n_list per "
                      "language; letters only, NFKC + casefold (scripts/gen_lexicon.py)"}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="exit 1 if the checked-in lexicon differs")
    args = parser.parse_args()
    real = real_words()
    found, common, accents = words(real), common_english(), accented(real)
    trie = marisa_trie.Trie(found)
    accent_trie = marisa_trie.BytesTrie((plain, " ".join(ws).encode()) for plain, ws in accents.items())
    if args.check:
        current = marisa_trie.Trie()
        current.mmap(str(OUTPUT))
        if sorted(current.keys()) != found or COMMON_EN.read_text("utf-8").split() != common:
            print("the lexicon is out of date: rerun scripts/gen_lexicon.py", file=sys.stderr)
            return 1
        return 0
    trie.save(str(OUTPUT))
    accent_trie.save(str(ACCENTED))
    COMMON_EN.write_text("\n".join(common) + "\n", encoding="utf-8")
    MANIFEST.write_text(json.dumps(manifest(len(found)), indent=1, sort_keys=True) + "\n", encoding="utf-8")
    print(f"{len(found)} words, {OUTPUT.stat().st_size} bytes -> {OUTPUT}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
