"""bench/human_text.py: the classification of human-written changes, the word alignment, the split of the
NoisyHate data (tune never shares a sentence or a changed word with the held-out set) and the JavaScript
baselines reported as skipped, not failed, without their modules. No held-out text is printed."""

import importlib.util
import json
import sys

import pytest
from helpers.paths import ROOT


def _load_bench_module(name: str):
    """``bench/<name>.py`` by its path: ``bench/`` never goes on ``sys.path``, where its ``service.py`` would
    hide the ``service`` package from every later test of the session."""
    spec = importlib.util.spec_from_file_location(f"bench_{name}", ROOT / "bench" / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up by name
    spec.loader.exec_module(module)
    return module


human_text = _load_bench_module("human_text")


@pytest.mark.parametrize(("clean", "perturbed", "kinds"), [
    ("shit", "SHIT", ["case"]),
    ("bitch", "BIITCH", ["doubled"]),
    ("suck", "SUCKK", ["doubled"]),
    ("terrible", "teeeerrrrible", ["stretched"]),
    ("ass", "ASSS", ["stretched"]),  # a double letter written three times: a run of three
    ("damn", "daaammnn", ["doubled", "stretched"]),
    ("ass", "as", ["undoubled"]),
    ("masturbation", "masturbaton", ["dropped"]),
    ("idiot", "idoit", ["swapped"]),
    ("ass", "a55", ["leet"]),
    ("bitch", "b¡tch", ["lookalike_punct"]),
    ("fuck", "f*ck", ["censor"]),
    ("shit", "sh**t", ["censor"]),  # two censor characters for one letter are not a doubling
    ("dick", "ԁick", ["homoglyph"]),  # Cyrillic komi de, in Unicode's confusables
    ("scum", "scúm", ["diacritic"]),
    ("fuck", "f.u.c.k", ["spacing"]),
    ("die", "di€", ["unmapped"]),
    ("fuck", "phuck", ["other"]),  # two edits
])
def test_changes_are_classified_by_kind(clean, perturbed, kinds):
    assert human_text.classify(clean, perturbed) == kinds


def test_changes_point_at_the_changed_word():
    clean, perturbed = "you are a terrible person", "you are a TERRIBL3 person"
    (change,) = human_text.changes(clean, perturbed)
    assert clean[slice(*change.clean_span)] == "terrible" == change.clean_word
    assert perturbed[slice(*change.perturbed_span)] == "TERRIBL3" == change.perturbed_word


def test_identical_texts_have_no_change():
    assert human_text.changes("the same words", "the same words") == []


def test_tune_part_shares_no_sentence_and_no_changed_word_with_the_heldout_part():
    heldout, tune = human_text.load_pairs("heldout"), human_text.load_pairs("tune")
    assert len(heldout) == 1339  # the published NoisyHate test set, every row
    assert tune
    held_sentences = {p.clean for p in heldout}
    held_changes = {(c.clean_word.casefold(), c.perturbed_word.casefold())
                    for p in heldout for c in human_text.changes(p.clean, p.perturbed)}
    shared_sentences = sum(1 for p in tune if p.clean in held_sentences)
    shared_changes = sum(1 for p in tune for c in human_text.changes(p.clean, p.perturbed)
                         if (c.clean_word.casefold(), c.perturbed_word.casefold()) in held_changes)
    assert (shared_sentences, shared_changes) == (0, 0)


def test_pair_files_are_one_json_object_a_line_with_the_documented_fields():
    for part in human_text.PARTS:
        lines = (human_text.DATA / f"{part}.jsonl").read_text(encoding="utf-8").splitlines()
        keys = {tuple(sorted(json.loads(line))) for line in lines}
        assert keys == {("clean", "perturbed", "quality_mean", "ratings")}, part


def test_js_baselines_are_skipped_without_their_modules(tmp_path, monkeypatch):
    monkeypatch.setattr(human_text, "JS_MODULES", tmp_path / "absent")
    result = human_text.js_flags(["some text"])
    assert set(result) == {"skipped"}
