"""Rebuild ``bench/data/noisyhate/{heldout,tune}.jsonl`` from a clone of the NoisyHate repository.

NoisyHate (Yiran Ye, Thai Le, Dongwon Lee; github YiranYe/NoisyHate, MIT licence) pairs Civil Comments
(Jigsaw) sentences with the same sentence in which one word is replaced by a perturbed spelling mined from
human-written social-media text, rated by five MTurk workers. See ``bench/data/noisyhate/README.md``.

- ``heldout.jsonl``: the published test set (``toxic detection model test set with perturbations.csv``),
  every row in file order (1,339 rows): the set issue 28 measured. Never tuned on, never printed.
- ``tune.jsonl``: every other (clean, perturbed) pair the repository holds (its MTurk batch files: candidates
  rated and not, before the quality filter), deduplicated and sorted, without any pair that shares with the
  held-out set its clean sentence or its changed word (clean word and perturbed spelling, case-folded).

Each line: ``{"clean", "perturbed", "quality_mean", "ratings"}``: the mean MTurk quality (1 very unlikely to
5 very likely that a reader reads the perturbed word as the original; held-out: the published mean) and the
number of ratings found in the repository's MTurk result files (0: never rated).

Reads files with ``git show COMMIT:PATH``; downloads nothing.

Usage: python scripts/extract_noisyhate.py --git-dir PATH [--commit SHA] [--out bench/data/noisyhate]
"""

from __future__ import annotations

import argparse
import csv
import io
import json
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))

from human_text import changes  # noqa: E402

COMMIT = "00c73fb230ece6ad1fcffc9448464888a922c3a0"
TEST_SET = "toxic detection model test set with perturbations.csv"
#: (clean column, perturbed column) spellings across the repository's CSV files.
COLUMNS = (("Input.clean", "Input.perturbed"), ("clean", "perturbed"))
#: MTurk answer columns and the rating each stands for.
ANSWERS = {"Answer.Very unlikely.1": 1, "Answer.Unlikely.2": 2, "Answer.Fair.3": 3, "Answer.Likely.4": 4,
           "Answer.Very likely.5": 5}


def git(git_dir: Path, *args: str) -> str:
    return subprocess.run(["git", "--git-dir", str(git_dir), *args], check=True, capture_output=True,
                          text=True).stdout


def rows(git_dir: Path, commit: str, path: str) -> list[dict[str, str]]:
    return list(csv.DictReader(io.StringIO(git(git_dir, "show", f"{commit}:{path}"))))


def changed_words(clean: str, perturbed: str) -> set[tuple[str, str]]:
    return {(c.clean_word.casefold(), c.perturbed_word.casefold()) for c in changes(clean, perturbed)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--git-dir", type=Path, required=True, help="a clone (or mirror) of YiranYe/NoisyHate")
    parser.add_argument("--commit", default=COMMIT)
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "data" / "noisyhate")
    args = parser.parse_args()
    files = git(args.git_dir, "ls-tree", "-r", "--name-only", args.commit).splitlines()

    ratings: dict[tuple[str, str], list[int]] = defaultdict(list)
    candidates: set[tuple[str, str]] = set()
    for path in sorted(f for f in files if f.endswith(".csv") and f.startswith("data/")):
        table = rows(args.git_dir, args.commit, path)
        if not table:
            continue
        columns = next(((c, p) for c, p in COLUMNS if c in table[0] and p in table[0]), None)
        if columns is None:
            continue
        for row in table:
            pair = (row[columns[0]], row[columns[1]])
            candidates.add(pair)
            picked = [value for name, value in ANSWERS.items() if row.get(name, "").lower() == "true"]
            if picked:
                ratings[pair].append(picked[0])

    heldout = [(r["clean_version"], r["perturbed_version"], float(r["quality_mean"]))
               for r in rows(args.git_dir, args.commit, TEST_SET)]
    held_pairs = {(c, p) for c, p, _ in heldout}
    held_clean = {c for c, _, _ in heldout}
    held_changes = set().union(*(changed_words(c, p) for c, p, _ in heldout))
    tune = sorted(pair for pair in candidates - held_pairs
                  if pair[0] not in held_clean and not changed_words(*pair) & held_changes)

    args.out.mkdir(parents=True, exist_ok=True)
    with open(args.out / "heldout.jsonl", "w", encoding="utf-8") as out:
        for clean, perturbed, quality in heldout:
            out.write(json.dumps({"clean": clean, "perturbed": perturbed, "quality_mean": quality,
                                  "ratings": len(ratings.get((clean, perturbed), []))}, ensure_ascii=False) + "\n")
    with open(args.out / "tune.jsonl", "w", encoding="utf-8") as out:
        for clean, perturbed in tune:
            found = ratings.get((clean, perturbed), [])
            out.write(json.dumps({"clean": clean, "perturbed": perturbed,
                                  "quality_mean": round(sum(found) / len(found), 3) if found else None,
                                  "ratings": len(found)}, ensure_ascii=False) + "\n")
    print(json.dumps({"commit": args.commit, "heldout": len(heldout), "candidates": len(candidates),
                      "tune": len(tune)}))


if __name__ == "__main__":
    main()
