"""Rebuild ``bench/data/hatecheck/{heldout,tune}.jsonl`` from a clone of the HateCheck data repository.

HateCheck (Paul Röttger et al., ACL 2021; github paul-rottger/hatecheck-data, CC BY 4.0) is a suite of
hand-written test cases for hate speech detection. Five of its functionalities are spelling variations that
the authors wrote by hand as perturbations of a simpler hateful case (``ref_case_id``): a swapped pair of
characters (``spell_char_swap_h``), a deleted character (``spell_char_del_h``), a deleted space
(``spell_space_del_h``), spaces between the letters of a word (``spell_space_add_h``) and leet
(``spell_leet_h``). See ``bench/data/hatecheck/README.md``.

Each pair: ``clean`` is the reference case's text, ``perturbed`` the spelling case's text (both as published,
surrounding whitespace stripped), ``kind`` the functionality without its ``spell_`` and ``_h``. Only the
published test suite's cases (``test_suite_cases.csv``: those at least four of five annotators labelled as
the authors did) are perturbed texts; a reference case is looked up in ``all_cases.csv``.

Split: a pair's keys are its reference template (``template:ID``; not for the three slur frames, which hold
nothing but the slur) and the words of its ``focus_lemma`` column (``word:LEMMA``, case-folded; a slur
placeholder as the slur's singular letters, so ``bitches`` is ``bitch``). Words contained in one another are
one key (``fuck`` in ``motherfucker`` and ``camelfucker``, ``shit`` in ``bullshit``). Pairs sharing a key are
one group (union-find), so no template (but the slur frames), focus word or slur is on both sides. Groups go,
largest first (the SHA-256 of their smallest key breaking ties), to the part with fewer pairs so far
(``heldout`` on a tie), counting for a group with profanity or slur pairs (reference functionality
``profanity_h`` or ``slur_h``: the ones a word list can flag) those pairs only, for any other group all
pairs: deterministic, and from the data alone (no matcher decides it).

Each line: ``{"clean", "perturbed", "kind", "case_id", "ref_case_id", "templ_id", "ref_templ_id", "focus"}``,
sorted by ``case_id``; ``focus`` lists the words of the split (the case's ``focus_lemma``, a slur as its
singular's letters; empty where the source names none).

Reads files with ``git show COMMIT:PATH``; downloads nothing.

Usage: python scripts/extract_hatecheck.py --git-dir PATH [--commit SHA] [--out bench/data/hatecheck]
"""

from __future__ import annotations

import argparse
import csv
import hashlib
import io
import json
import re
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
COMMIT = "d84302298ceeb34f4b0dde2d8a1f4932c2caa612"
KINDS = ("char_swap", "char_del", "space_del", "space_add", "leet")
#: Reference functionalities whose cases hold profanity or a slur: the ones a word list can flag, balanced
#: between the parts.
PROFANE = ("profanity_h", "slur_h")


def git(git_dir: Path, *args: str) -> str:
    return subprocess.run(["git", "--git-dir", str(git_dir), *args], check=True, capture_output=True,
                          text=True).stdout


def rows(git_dir: Path, commit: str, path: str) -> list[dict[str, str]]:
    return list(csv.DictReader(io.StringIO(git(git_dir, "show", f"{commit}:{path}"))))


def keys(case: dict[str, str], clean: str, slurs: dict[str, str]) -> set[str]:
    """The template and the words a pair stands for (see the module docstring)."""
    # The three slur frames ("Typical [SLUR_S] behaviour.") hold nothing a list flags but the slur: a slur
    # case's keys are its slur, so each slur falls on one side and the frames on both.
    out = set() if "[SLUR_" in case["case_templ"] else {f"template:{case['ref_templ_id']}"}
    for lemma in case["focus_lemma"].split(","):
        lemma = lemma.strip().casefold()
        if lemma.startswith("[slur_"):
            lemma = next(key for spelling, key in slurs.items()
                         if re.search(rf"\b{re.escape(spelling)}\b", clean.casefold()))
        if lemma and lemma != "-":
            out.add(f"word:{lemma}")
    return out


def split(pair_keys: list[set[str]], profane: list[bool]) -> list[str]:
    """``tune`` or ``heldout`` per pair (see the module docstring)."""
    parent: dict[str, str] = {}

    def find(key: str) -> str:
        while parent.setdefault(key, key) != key:
            key = parent[key]
        return key

    def union(a: str, b: str) -> None:
        parent[find(a)] = find(b)

    words = sorted({k for ks in pair_keys for k in ks if k.startswith("word:")})
    for a in words:
        for b in words:
            if a != b and a[5:] in b[5:]:  # "fuck" in "motherfucker", "shit" in "bullshit"
                union(a, b)
    for ks in pair_keys:
        first, *rest = sorted(ks)
        for key in rest:
            union(first, key)
    groups: dict[str, list[int]] = {}
    for i, ks in enumerate(pair_keys):
        groups.setdefault(find(min(ks)), []).append(i)
    members: dict[str, set[str]] = {}
    for ks in pair_keys:
        for key in ks:
            members.setdefault(find(key), set()).add(key)

    def weight(root: str) -> tuple[int, int]:
        return sum(profane[i] for i in groups[root]), len(groups[root])

    # Largest first (a greedy partition), the SHA-256 of the smallest key breaking ties; a group with
    # profane pairs goes to the part with fewer profane pairs, any other to the part with fewer pairs.
    order = sorted(groups, key=lambda root: (tuple(-w for w in weight(root)),
                                             hashlib.sha256(min(members[root]).encode()).hexdigest()))
    profane_count, count = {"heldout": 0, "tune": 0}, {"heldout": 0, "tune": 0}
    part = [""] * len(pair_keys)
    for root in order:
        bad, size = weight(root)
        sizes = profane_count if bad else count
        side = "heldout" if sizes["heldout"] <= sizes["tune"] else "tune"
        for i in groups[root]:
            part[i] = side
        profane_count[side] += bad
        count[side] += size
    return part


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--git-dir", type=Path, required=True,
                        help="a clone (or mirror) of paul-rottger/hatecheck-data")
    parser.add_argument("--commit", default=COMMIT)
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "data" / "hatecheck")
    args = parser.parse_args()

    every = {r["case_id"]: r for r in rows(args.git_dir, args.commit, "all_cases.csv")}
    placeholders = {r["Placeholder"]: [v.strip() for v in r["Values"].split(",")]
                    for r in rows(args.git_dir, args.commit, "template_placeholders.csv")}
    # Every spelling of a slur (singular, plural) -> the singular's letters: the slur's key.
    slurs: dict[str, str] = {}
    for name in ("[SLUR_S]", "[SLUR_P]"):
        for singular, value in zip(placeholders["[SLUR_S]"], placeholders[name]):
            slurs.setdefault(value.casefold(), re.sub(r"[^a-z]", "", singular.casefold()))
    # Longest first: "camel fuckers" before "fuckers", "faggot" before "fag".
    slurs = dict(sorted(slurs.items(), key=lambda kv: -len(kv[0])))

    pairs, pair_keys, profane = [], [], []
    for case in rows(args.git_dir, args.commit, "test_suite_cases.csv"):
        kind = case["functionality"].removeprefix("spell_").removesuffix("_h")
        if kind not in KINDS:
            continue
        ref = every[case["ref_case_id"]]
        clean, perturbed = ref["test_case"].strip(), case["test_case"].strip()
        pairs.append({"clean": clean, "perturbed": perturbed, "kind": kind, "case_id": int(case["case_id"]),
                      "ref_case_id": int(ref["case_id"]), "templ_id": int(case["templ_id"]),
                      "ref_templ_id": int(case["ref_templ_id"])})
        pair_keys.append(keys(case, clean, slurs))
        pairs[-1]["focus"] = sorted(k.removeprefix("word:") for k in pair_keys[-1] if k.startswith("word:"))
        profane.append(ref["functionality"] in PROFANE)
    parts = split(pair_keys, profane)

    args.out.mkdir(parents=True, exist_ok=True)
    counts = {}
    for name in ("heldout", "tune"):
        chosen = sorted((p for p, side in zip(pairs, parts) if side == name), key=lambda p: p["case_id"])
        counts[name] = len(chosen)
        with open(args.out / f"{name}.jsonl", "w", encoding="utf-8") as out:
            for pair in chosen:
                out.write(json.dumps(pair, ensure_ascii=False) + "\n")
    print(json.dumps({"commit": args.commit, "pairs": len(pairs), **counts}))


if __name__ == "__main__":
    main()
