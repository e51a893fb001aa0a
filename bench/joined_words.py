"""Prototype of a "joined word" rule (issue 28): what it would catch, what it would wrongly flag, and what the
automaton would pay to keep it on the token path. Not wired into the matcher: the numbers say why
(docs/matching.md, "What is not caught"; docs/benchmarks.md, "A term joined to another word").

The rule, on text (``joined_term``): a word (a maximal run of word characters, letters only) that the lexicon
(``guardrail/matching/data/lexicon.marisa``) does not hold, and that is not itself a term, is read as a term
``t`` of the list when it splits as ``t + w``, ``w + t`` or ``w + t + w'`` with ``w``, ``w'`` common English
words (``common_en.txt``, wordfreq's 30,000 most frequent, at least ``--other-min`` letters): HateCheck's deleted
spaces, ``whorebehaviour``, ``manyfaggots``. A ``prefix`` term also takes the rest of the word after it
(``w + t...``). This is exactly what an automaton path "term, then a trie of common words, then a word
boundary" (and the mirror) with the lexicon's compounds excluded per term at compile time would match, so the
text-level prototype measures the rule itself; the costs of building it into the automaton are estimated in
section ``design``.

Sections (JSON on stdout):

* ``recall``: at the default level, with the rule added (``or``): HateCheck (``bench/data/hatecheck``) tune and
  held-out parts, aggregate text recall (the held-out part only as totals, and by the source's kind), and
  NoisyHate's two parts; for the tune part the pairs the rule adds and those still missed.
* ``fp``: words the rule flags that the default level does not, per corpus: wordfreq's top 50k English words
  and the 300,047-word dictionary (the benchmark's floors: 0 / 0; most of both are in the lexicon, so also)
  wordfreq's English words ranked 50k-100k and 100k-end (beyond the lexicon: the measure of how the rule
  generalises), the top 30k words of ru, el, de, es, fr against their own lists (floor ≤ 0.005%), and German,
  Dutch, Swedish words ranked 30k-200k (compounds) against their own lists and against ``en``.
* ``variants``: the same recall and the English and compound false positives for tighter versions of the rule.
* ``design``: sizes that decide how the rule could live in the obfuscation automaton (see ``design_costs``).

Usage: python bench/joined_words.py [--quick] [--examples 30]
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import re
import sys
import time
from collections import defaultdict
from collections.abc import Collection, Container
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import wordfreq  # noqa: E402
from human_text import PARTS, load_pairs  # noqa: E402
from obfuscation import LANGUAGES, PLAIN_PROSE, dictionary_words  # noqa: E402

from guardrail.matching.normalize import normalize_term  # noqa: E402
from guardrail.matching.obfuscation import DEFAULT_OBFUSCATION, OFF, Obfuscation, effective  # noqa: E402
from guardrail.matching.obfuscation.lexicon import COMMON_EN_PATH, lexicon  # noqa: E402
from guardrail.matching.textmatch import TextMatcher  # noqa: E402
from guardrail.wordlists.wordlist import MatchMode, bundled_names, bundled_wordlist  # noqa: E402

WORD = re.compile(r"\w+")
#: The sides a term may be joined on: term + word, word + term, word + term + word.
SIDES = ("tw", "wt", "wtw")


class Rule:
    """The joined-word rule for one list (module docstring).

    Args:
        list_name: a bundled list; its case-insensitive, non-regex word and prefix terms of one word whose
            default level is not ``off`` take part.
        other_min: the fewest letters of the common word joined to the term.
        term_min: the fewest letters of the term.
        sides: which of :data:`SIDES` are read.
        common_top: how many of ``common_en.txt``'s words count as common.
        also_real: words spared beside the lexicon (to measure exclusions learnt from one corpus on another).
    """

    def __init__(self, list_name: str, other_min: int = 3, term_min: int = 3, sides: Collection[str] = SIDES,
                 common_top: int = 30_000, also_real: Container[str] = frozenset()):
        self.terms: dict[str, MatchMode] = {}
        for term in bundled_wordlist(list_name).terms:
            if term.regex or term.case_sensitive or term.match not in (MatchMode.WORD, MatchMode.PREFIX):
                continue
            text = normalize_term(term.text)
            if text.isalpha() and len(text) >= term_min and effective(DEFAULT_OBFUSCATION, text) != OFF:
                self.terms[text] = term.match
        self.prefixes = tuple(t for t, m in self.terms.items() if m is MatchMode.PREFIX)
        words = COMMON_EN_PATH.read_text("utf-8").split()[:common_top]
        self.common = frozenset(w for w in words if len(w) >= other_min and w.isalpha())
        self.sides, self.term_min, self.also_real = frozenset(sides), term_min, also_real

    def joined_term(self, word: str) -> tuple[str, str] | None:
        """``(term, side)`` when ``word`` reads as a term joined to common words, else None."""
        w = word.casefold()
        if not w.isalpha() or w in self.terms or w in lexicon() or w in self.also_real:
            return None
        terms, common, n = self.terms, self.common, len(w)
        for i in range(1, n):
            head, rest = w[:i], w[i:]
            if "tw" in self.sides and head in terms and rest in common:
                return head, "tw"
            if head not in common:
                continue
            if "wt" in self.sides:
                if rest in terms:
                    return rest, "wt"
                for p in self.prefixes:
                    if rest.startswith(p):
                        return p, "wt"
            if "wtw" in self.sides:
                for j in range(i + self.term_min, n):
                    if w[i:j] in terms and w[j:] in common:
                        return w[i:j], "wtw"
        return None

    def flags(self, text: str) -> bool:
        return any(self.joined_term(m.group()) for m in WORD.finditer(text))


@functools.cache
def matcher(list_name: str, setting: str) -> TextMatcher:
    return TextMatcher([bundled_wordlist(list_name)], obfuscation=Obfuscation.parse(setting))


def eligible_pairs(dataset: str, part: str) -> list[tuple[Any, bool]]:
    """Pairs whose clean text ``off`` flags (the obfuscation benchmark's measure), each with whether the
    default level flags the perturbed text."""
    off, default = matcher("en", "off"), matcher("en", str(DEFAULT_OBFUSCATION))
    return [(p, bool(default.scan(p.perturbed))) for p in load_pairs(part, dataset) if off.scan(p.clean)]


def bench_recall(rule: Rule, examples: int) -> dict:
    out: dict = {}
    for dataset in ("hatecheck", "noisyhate"):
        for part in PARTS:
            pairs = eligible_pairs(dataset, part)
            with_rule = [flagged or rule.flags(p.perturbed) for p, flagged in pairs]
            row: dict = {"eligible": len(pairs), "default": sum(f for _, f in pairs), "with_rule": sum(with_rule),
                         "default_recall": round(sum(f for _, f in pairs) / len(pairs), 4),
                         "with_rule_recall": round(sum(with_rule) / len(pairs), 4)}
            kinds: dict[str, list[int]] = defaultdict(lambda: [0, 0, 0])
            for (p, flagged), caught in zip(pairs, with_rule, strict=True):
                kind = getattr(p, "kind", None)
                if kind:
                    kinds[kind][0] += 1
                    kinds[kind][1] += flagged
                    kinds[kind][2] += caught
            if kinds:
                row["by_source_kind"] = {k: {"eligible": a, "default": b, "with_rule": c}
                                         for k, (a, b, c) in sorted(kinds.items())}
            if part == "tune":  # the held-out part is read as totals only
                row["added"] = [p.perturbed for (p, f), c in zip(pairs, with_rule, strict=True)
                                if c and not f][:examples]
                row["still_missed"] = [p.perturbed for (p, f), c in zip(pairs, with_rule, strict=True)
                                       if not c][:examples]
            out[f"{dataset}/{part}"] = row
    return out


def fp_corpora(quick: bool) -> list[tuple[str, str, list[str]]]:
    """(name, list, words) for every false-positive corpus."""
    step = 10 if quick else 1
    en = wordfreq.top_n_list("en", 10**6)
    out = [("wordfreq_en_top50k", "en", en[:50_000:step]), ("wordfreq_en_50k-100k", "en", en[50_000:100_000:step]),
           ("wordfreq_en_100k-end", "en", en[100_000::step]), ("dictionary_en", "en", dictionary_words()[::step])]
    names = set(bundled_names())
    for lang in LANGUAGES:
        words = wordfreq.top_n_list(lang, 30_000)[::step]
        out.append((f"wordfreq_{lang}_top30k", lang if lang in names else "en", words))
    for lang in ("de", "nl", "sv"):
        words = wordfreq.top_n_list(lang, 200_000)[30_000::step]
        out.append((f"wordfreq_{lang}_30k-200k", lang if lang in names else "en", words))
        out.append((f"wordfreq_{lang}_30k-200k", "en", words))
    return out


def bench_fp(corpora: list[tuple[str, str, list[str]]], examples: int, **rule_args) -> list[dict]:
    rules: dict[str, Rule] = {}
    out = []
    for name, list_name, words in corpora:
        rule = rules.setdefault(list_name, Rule(list_name, **rule_args))
        default = matcher(list_name, str(DEFAULT_OBFUSCATION))
        new = [(w, hit) for w in words if (hit := rule.joined_term(w)) and not default.scan(w)]
        out.append({"corpus": name, "list": list_name, "words": len(words),
                    "beyond_lexicon": sum(1 for w in words if w.casefold() not in lexicon()),
                    "new_fp": len(new), "new_fp_pct": round(100 * len(new) / len(words), 4) if words else 0.0,
                    "examples": [f"{w} ({t}, {side})" for w, (t, side) in new[:examples]]})
    return out


def design_costs(rule: Rule) -> dict:
    """What the rule would cost the obfuscation automaton (docs/matching.md, "How the automaton keeps it").

    * ``common_trie_nodes``: the trie of the common words a term may be joined to (its distinct prefixes).
    * ``per_term_copies_nodes``: a DFA node keeps the NFA states of its threads, not which term a thread
      began as, so a trie shared by every term cannot tell which term to report at its end: the path "term,
      common word, boundary" needs one copy of the trie per term (the ``en`` list's whole obfuscation NFA holds
      ~97k states today).
    * ``leading_trie_held_chars_per_position``: the mirror path ("common word, then term") begins at every word
      boundary and stays alive while the word written so far begins a common word (or a common word and then
      the beginning of a term): the characters a thread of it holds back, per position of the benchmark's plain
      prose (today's default level adds +0.03 over ``off``); and each distinct word prefix of the text is a new
      DFA node of a lazily built automaton whose node limit (``MAX_OBFUSCATION_DFA_STATES``) would then be
      reached by decoding, not at compile time.
    * ``compounds_excluded``: the lexicon's words that split as a term and a common word (what the automaton
      would exclude per term at compile time), from the 300,047-word dictionary.
    """
    prefixes = {w[:k] for w in rule.common for k in range(1, len(w) + 1)}
    term_prefixes = {t[:k] for t in rule.terms for k in range(1, len(t) + 1)}
    held = []
    for match in re.finditer(r"\w+|\W", PLAIN_PROSE):
        token = match.group().casefold()
        if not token[0].isalnum():
            held.append(0)
            continue
        for k in range(1, len(token) + 1):
            so_far = token[:k]
            alive = so_far in prefixes or any(so_far[:i] in rule.common and so_far[i:] in term_prefixes
                                              for i in range(1, k))
            held.append(k if alive else 0)
    excluded = 0
    for word in dictionary_words():
        if word.isalpha() and word not in rule.terms:
            n = len(word)
            excluded += any((word[:i] in rule.terms and word[i:] in rule.common)
                            or (word[:i] in rule.common and word[i:] in rule.terms) for i in range(1, n))
    return {"terms": len(rule.terms), "common_words": len(rule.common), "common_trie_nodes": len(prefixes),
            "per_term_copies_nodes": len(prefixes) * len(rule.terms),
            "leading_trie_held_chars_per_position": round(sum(held) / len(held), 3),
            "compounds_excluded": excluded}


VARIANTS = {
    "other_min_4": {"other_min": 4},
    "term_min_4": {"term_min": 4},
    "other_and_term_min_4": {"other_min": 4, "term_min": 4},
    "term_then_word_only": {"sides": ("tw",)},
    "no_word_term_word": {"sides": ("tw", "wt")},
    "common_top_10k": {"common_top": 10_000},
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="every 10th word of each false-positive corpus")
    parser.add_argument("--examples", type=int, default=30, help="examples per corpus")
    args = parser.parse_args()
    started = time.perf_counter()
    corpora = fp_corpora(args.quick)
    out: dict = {"benchmark": "joined_words", "quick": args.quick,
                 "rule": {"other_min": 3, "term_min": 3, "sides": list(SIDES), "common_top": 30_000}}
    rule = Rule("en")
    out["recall"] = bench_recall(rule, args.examples)
    out["fp"] = bench_fp(corpora, args.examples)
    en_top = wordfreq.top_n_list("en", 100_000)
    variant_corpora = [c for c in corpora if c[1] == "en" and not c[0].startswith(("dictionary", "wordfreq_el"))]
    variants = {name: {"args": kw} for name, kw in VARIANTS.items()}
    variants["spare_wordfreq_en_top100k"] = {"args": {"also_real": "wordfreq en top 100k"}}
    for name, entry in variants.items():
        kw = dict(entry["args"])
        if name == "spare_wordfreq_en_top100k":
            kw = {"also_real": frozenset(en_top)}
        variant = Rule("en", **kw)
        entry["recall"] = {k: v["with_rule_recall"] for k, v in bench_recall(variant, 0).items()}
        entry["fp"] = {f"{r['corpus']} vs {r['list']}": f"{r['new_fp']} ({r['new_fp_pct']}%)"
                       for r in bench_fp(variant_corpora, 0, **kw)}
    out["variants"] = variants
    out["design"] = design_costs(rule)
    out["seconds"] = round(time.perf_counter() - started, 1)
    json.dump(out, sys.stdout, indent=1, ensure_ascii=False)
    print()


if __name__ == "__main__":
    main()
