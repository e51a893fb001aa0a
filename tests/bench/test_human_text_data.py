"""bench/human_text.py: the classification of human-written changes, the word alignment, the split of the
NoisyHate data (tune never shares a sentence or a changed word with the held-out set) and of the HateCheck
data (no template but the slur frames, no focus word and no slur on both sides) and the JavaScript
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
    ("I hate women.", "Ihate women", ["joined"]),  # the space left between words is not a spaced form
    ("whore behaviour.", "whorebehaviour.", ["joined"]),  # sentence punctuation is not part of the change
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


#: HateCheck's slur frames ("Typical [SLUR_S] behaviour."): the one template on both sides, each slur on one.
HATECHECK_SLUR_FRAMES = {126, 127, 130}


def _hatecheck_rows(part: str) -> list[dict]:
    path = human_text.DATASETS["hatecheck"] / f"{part}.jsonl"
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


def test_hatecheck_files_hold_every_spelling_case_once_with_the_documented_fields():
    rows = {part: _hatecheck_rows(part) for part in human_text.PARTS}
    fields = {"clean", "perturbed", "kind", "case_id", "ref_case_id", "templ_id", "ref_templ_id", "focus"}
    for part, part_rows in rows.items():
        assert {frozenset(row) for row in part_rows} == {frozenset(fields)}, part
        assert {row["kind"] for row in part_rows} == set(human_text.HATECHECK_KINDS), part
        assert all(row["clean"] != row["perturbed"] for row in part_rows), part
        loaded = human_text.load_pairs(part, "hatecheck")
        assert [(p.clean, p.perturbed, p.kind) for p in loaded] == \
            [(r["clean"], r["perturbed"], r["kind"]) for r in part_rows]
    case_ids = [row["case_id"] for part_rows in rows.values() for row in part_rows]
    assert len(case_ids) == len(set(case_ids)) == 760  # the published suite's spelling cases, each once


def test_hatecheck_parts_share_no_template_focus_word_or_slur():
    tune, heldout = _hatecheck_rows("tune"), _hatecheck_rows("heldout")
    shared_templates = ({r["ref_templ_id"] for r in tune} & {r["ref_templ_id"] for r in heldout}) \
        - HATECHECK_SLUR_FRAMES
    tune_words = {w for r in tune for w in r["focus"]}
    held_words = {w for r in heldout for w in r["focus"]}
    # One word inside another is the same word for a rule ("fuck" in "motherfucker").
    shared_words = {(a, b) for a in tune_words for b in held_words if a in b or b in a}
    shared_sentences = {r["clean"] for r in tune} & {r["clean"] for r in heldout}
    assert (shared_templates, shared_words, shared_sentences) == (set(), set(), set())


def test_js_baselines_are_skipped_without_their_modules(tmp_path, monkeypatch):
    monkeypatch.setattr(human_text, "JS_MODULES", tmp_path / "absent")
    result = human_text.js_flags(["some text"])
    assert set(result) == {"skipped"}
