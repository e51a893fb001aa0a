"""Obfuscation benchmark: what each obfuscation level catches and what it wrongly flags, against ``off``.

Prints one JSON object. For each of the 10 settings (the 5 levels of
``guardrail.matching.obfuscation.Obfuscation.LEVELS``, each without and with ``+markup``):

- **catch rate** on the project's obfuscation set (``tests/data/obfuscation_cases.json``, scanned against the
  bundled ``en`` list): a case is caught when ``TextMatcher.scan(text)`` is non-empty. Per setting (overall,
  and the cases the setting must catch: those whose ``level`` it covers, with the ones it misses listed, and
  the cases caught only through another term), per form, per case level, and the set's ``traps`` (clean
  texts) that the setting flags;
- **new false positives** against ``off``, the baseline measured in the same run: a word is a new false
  positive at a setting when the setting flags it and ``off`` does not. Every word is scanned on its own
  (the text is the word). Corpora: wordfreq's top 50,000 English words and an English dictionary of
  300,047 words (``dictionary_words``: the ``english-words`` package's largest set with lemminflect's lexicon
  and inflections) against ``en``;
  the top 5,000 wordfreq English words (alphabetic, two letters or more) that ``off`` does not flag, written
  with single spaces between the letters (``t i t l e``) and with dots (``t.i.t.l.e``), against ``en``; and
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

Usage: python bench/obfuscation.py [--quick] [--examples 20] [--settings off,masked+markup] [--costs-only]
       [--cold-reps 3] [--warm-reps 7]
"""

from __future__ import annotations

import argparse
import importlib.metadata
import json
import os
import platform
import time
from collections import defaultdict
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import english_words  # noqa: E402
import lemminflect  # noqa: E402
import wordfreq  # noqa: E402

from guardrail.matching.obfuscation import DEFAULT_OBFUSCATION, Obfuscation  # noqa: E402
from guardrail.matching.textmatch import TextMatcher  # noqa: E402
from guardrail.wordlists.wordlist import bundled_names, bundled_wordlist  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
CASES = ROOT / "tests" / "data" / "obfuscation_cases.json"
LANGUAGES = ("ru", "el", "de", "es", "fr")

# Corpus sizes: full run, --quick.
EN_TOP = (50_000, 5_000)
EN_WORDS_SAMPLE = (None, 20_000)  # None: every word of the set
SPACED_WORDS = (5_000, 500)
LANG_TOP = (30_000, 3_000)


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
    names = set(bundled_names())
    for lang in LANGUAGES:
        list_name = lang if lang in names else "en"
        note = None if list_name == lang else f"no bundled '{lang}' list: scanned against 'en'"
        out.append((f"wordfreq_{lang}", list_name, wordfreq.top_n_list(lang, LANG_TOP[q]), note))
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
                lists = with_obfuscation([bundled_wordlist("en")], level)
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
                    own = with_obfuscation([wordlist_from_terms([f"zorblat{rep}x{k}" for k in range(10)])], level)
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="smoke run: about a tenth of every corpus")
    parser.add_argument("--examples", type=int, default=20, help="example false positives per corpus and setting")
    parser.add_argument("--settings", default=",".join(all_settings()),
                        help="comma-separated settings (LEVEL or LEVEL+markup); 'off' is always measured")
    parser.add_argument("--costs-only", action="store_true", help="only the compile, request-term, guard-step "
                        "and hold-back costs of the default setting against off")
    parser.add_argument("--reps", type=int, default=15, help="request-term compiles per setting (median)")
    parser.add_argument("--cold-reps", type=int, default=3, help="cold compiles per setting (median)")
    parser.add_argument("--warm-reps", type=int, default=7, help="warm loads from Redis per setting (median)")
    args = parser.parse_args()
    if args.costs_only:
        print(json.dumps({"benchmark": "obfuscation", "costs": bench_costs(
            str(DEFAULT_OBFUSCATION), args.reps, args.cold_reps, args.warm_reps)},
                         indent=2))
        return
    settings = [str(Obfuscation.parse(s)) for s in args.settings.split(",") if s.strip()]
    if "off" not in settings:
        settings.insert(0, "off")
    started = time.perf_counter()
    matchers = Matchers()
    out: dict = {"benchmark": "obfuscation", "quick": args.quick, "settings": settings, "versions": versions()}
    out["cases"], out["traps"] = bench_cases(matchers, settings)
    out["false_positives"] = {}
    for name, list_name, words, note in corpora(args.quick, matchers):
        out["false_positives"][name] = bench_corpus(matchers, settings, list_name, words, args.examples, note)
    out["fp_summary"] = {setting: {name: corpus["settings"][setting]["new_fp_pct"]
                                   for name, corpus in out["false_positives"].items()}
                         for setting in settings}
    out["matcher_build_seconds"] = matchers.build_seconds
    out["costs"] = bench_costs(str(DEFAULT_OBFUSCATION), args.reps, args.cold_reps, args.warm_reps)
    out["total_seconds"] = round(time.perf_counter() - started, 1)
    print(json.dumps(out, indent=2, ensure_ascii=False))


if __name__ == "__main__":
    main()
