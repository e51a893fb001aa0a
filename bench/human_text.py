"""Human-written perturbed text for ``bench/obfuscation.py``: the NoisyHate and HateCheck pairs, the word each
pair changes, a mechanical classification of the change, and the JavaScript filter baselines.

Data (``DATASETS``; each directory's README gives the source, commit, licence and the split): ``tune.jsonl``
(rules may be derived from it; its misses are printed) and ``heldout.jsonl`` (never printed, the headline).

- ``bench/data/noisyhate/``: each line ``{"clean": str, "perturbed": str, "quality_mean": float | null,
  "ratings": int}``;
- ``bench/data/hatecheck/``: each line ``{"clean": str, "perturbed": str, "kind": str, "case_id": int,
  "ref_case_id": int, "templ_id": int, "ref_templ_id": int}``; ``kind`` is the source's own name for the
  perturbation (``HATECHECK_KINDS``).

The JavaScript filters run through ``node bench/js_filters/check.mjs`` on modules installed by
``python bench/obfuscation.py --install-js-filters`` (``npm ci`` from ``bench/js_filters/package-lock.json``
into ``.cache/js-filters``, git-ignored); without node or the modules they are reported as skipped.
"""

from __future__ import annotations

import difflib
import importlib.resources
import json
import os
import re
import shutil
import string
import subprocess
import unicodedata
from dataclasses import dataclass
from functools import cache
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DATASETS = {"noisyhate": ROOT / "bench" / "data" / "noisyhate", "hatecheck": ROOT / "bench" / "data" / "hatecheck"}
DATA = DATASETS["noisyhate"]
PARTS = ("tune", "heldout")
#: HateCheck's spelling functionalities (``spell_<kind>_h``): a swapped pair of letters, a deleted letter, a
#: deleted space, spaces between the letters of a word, leet.
HATECHECK_KINDS = ("char_swap", "char_del", "space_del", "space_add", "leet")
JS_DIR = ROOT / "bench" / "js_filters"
JS_MODULES = Path(os.environ.get("GUARDRAIL_JS_FILTERS_DIR", ROOT / ".cache" / "js-filters"))

#: Characters a writer puts in place of letters to half-hide a word (self-censoring).
CENSOR = "*_#%?"
#: Look-alike punctuation for a letter (issue 28 names them apart from leet): ``!``/``¡``/``|`` for i or l.
LOOKALIKE_PUNCT = {"!": "il", "¡": "il", "|": "il"}
#: Separators between letters (``f.u.c.k``, ``f-u-c-k``, ``f u c k``).
SEPARATORS = " .-"
#: Kinds a change can have; a change has one or more. ``undoubled``: a double letter written once
#: (``as`` for ``ass``); ``unmapped``: a non-letter in no table (``€``), aligned as any letter; ``joined``:
#: the space between two words left out (``Ihate``).
KINDS = ("case", "doubled", "stretched", "undoubled", "dropped", "inserted", "substituted", "swapped", "leet",
         "lookalike_punct", "censor", "homoglyph", "diacritic", "unmapped", "spacing", "joined", "other")


@dataclass(frozen=True)
class Pair:
    clean: str
    perturbed: str
    quality_mean: float | None = None
    ratings: int = 0
    #: The source's own name for the perturbation (HateCheck's ``HATECHECK_KINDS``); ``None`` for NoisyHate.
    kind: str | None = None


@dataclass(frozen=True)
class Change:
    """One changed word: its spans (start, end: characters, end exclusive) in the clean and perturbed text."""

    clean_span: tuple[int, int]
    perturbed_span: tuple[int, int]
    clean_word: str
    perturbed_word: str


def load_pairs(part: str, dataset: str = "noisyhate") -> list[Pair]:
    """The pairs of ``part`` (``PARTS``) of ``dataset`` (``DATASETS``). Raises ``KeyError`` for an unknown
    dataset, ``FileNotFoundError`` for an unknown part."""
    path = DATASETS[dataset] / f"{part}.jsonl"
    out = []
    for line in path.read_text(encoding="utf-8").splitlines():
        row = json.loads(line)
        out.append(Pair(row["clean"], row["perturbed"], row.get("quality_mean"), row.get("ratings", 0),
                        row.get("kind")))
    return out


def words(text: str) -> list[tuple[int, int]]:
    return [m.span() for m in re.finditer(r"\S+", text)]


def changes(clean: str, perturbed: str) -> list[Change]:
    """The whitespace-separated words that differ (case included), aligned with ``difflib.SequenceMatcher``;
    a replaced run of words is one change spanning the run."""
    a, b = words(clean), words(perturbed)
    matcher = difflib.SequenceMatcher(a=[clean[s:e] for s, e in a], b=[perturbed[s:e] for s, e in b],
                                      autojunk=False)
    out = []
    for tag, i1, i2, j1, j2 in matcher.get_opcodes():
        if tag == "equal":
            continue
        cs = (a[i1][0], a[i2 - 1][1]) if i2 > i1 else ((a[i1][0],) * 2 if i1 < len(a) else (len(clean),) * 2)
        ps = (b[j1][0], b[j2 - 1][1]) if j2 > j1 else ((b[j1][0],) * 2 if j1 < len(b) else (len(perturbed),) * 2)
        out.append(Change(cs, ps, clean[cs[0]:cs[1]], perturbed[ps[0]:ps[1]]))
    return out


@cache
def _tables() -> tuple[dict[str, str], dict[str, str]]:
    """(leet: char -> letters, confusables: char -> letter) from the project's obfuscation data (the
    tables the matcher uses: ``guardrail/matching/data/obfuscation.json``)."""
    data = json.loads(importlib.resources.files("guardrail.matching").joinpath("data/obfuscation.json")
                      .read_text(encoding="utf-8"))
    leet: dict[str, str] = {}
    for letter, chars in data["leet"].items():
        for char in chars:
            leet[char] = leet.get(char, "") + letter
    return leet, dict(data["confusables"])


def _slots(word: str, kinds: set[str]) -> list[str]:
    """Each character of ``word`` as the letters it can stand for ('' for a separator, dropped), recording the
    character kinds in ``kinds``."""
    leet, confusables = _tables()
    out = []
    for char in word:
        low = char.lower()
        if low in string.ascii_lowercase:
            out.append(low)
        elif char in SEPARATORS:
            kinds.add("spacing")
        elif char in LOOKALIKE_PUNCT:
            kinds.add("lookalike_punct")
            out.append(LOOKALIKE_PUNCT[char])
        elif char in leet:
            kinds.add("leet")
            out.append(leet[char])
        elif char in CENSOR:
            kinds.add("censor")
            out.append(string.ascii_lowercase)
        else:
            folded = unicodedata.normalize("NFKC", char).casefold()
            base = unicodedata.normalize("NFD", folded)[:1]
            if folded in confusables:
                kinds.add("homoglyph")
                out.append(confusables[folded])
            elif base in string.ascii_lowercase and len(folded) == 1:
                kinds.add("diacritic")
                out.append(base)
            else:
                kinds.add("unmapped")
                out.append(string.ascii_lowercase)
    return out


def _align(slots: list[str], clean: str) -> list[tuple[str, int, int]]:
    """The cheapest edit script turning ``clean`` into ``slots``: a list of (operation, slot index, clean
    index). A slot matches a clean letter it can stand for (cost 0); a slot that repeats the clean letter
    just matched is an ``extra`` copy (cost 0); ``undoubled`` (a letter of a clean double letter skipped),
    ``dropped``, ``inserted``, ``substituted`` and ``swapped`` (two adjacent letters crossed) cost 1."""
    n, m = len(slots), len(clean)
    inf = float("inf")
    cost = [[inf] * (m + 1) for _ in range(n + 1)]
    back: list[list[tuple[str, int, int] | None]] = [[None] * (m + 1) for _ in range(n + 1)]
    cost[0][0] = 0
    for i in range(n + 1):
        for j in range(m + 1):
            if cost[i][j] == inf:
                continue
            moves: list[tuple[int, int, int, str]] = []  # (next i, next j, cost, operation)
            if i < n and j < m:
                moves.append((i + 1, j + 1, 0, "match") if clean[j] in slots[i] else (i + 1, j + 1, 1, "substituted"))
            if i < n and j > 0 and clean[j - 1] in slots[i]:
                moves.append((i + 1, j, 0, "extra"))
            if i < n:
                moves.append((i + 1, j, 1, "inserted"))
            if j < m:
                doubled = (j > 0 and clean[j] == clean[j - 1]) or (j + 1 < m and clean[j] == clean[j + 1])
                moves.append((i, j + 1, 1, "undoubled" if doubled else "dropped"))
            if i + 1 < n and j + 1 < m and clean[j] in slots[i + 1] and clean[j + 1] in slots[i] \
                    and clean[j] != clean[j + 1]:
                moves.append((i + 2, j + 2, 1, "swapped"))
            for ni, nj, add, op in moves:
                if cost[i][j] + add < cost[ni][nj]:
                    cost[ni][nj] = cost[i][j] + add
                    back[ni][nj] = (op, i, j)
    ops = []
    i, j = n, m
    while (i, j) != (0, 0):
        step = back[i][j]
        assert step is not None
        op, pi, pj = step
        ops.append((op, pi, pj))
        i, j = pi, pj
    return ops[::-1]


def classify(clean_word: str, perturbed_word: str) -> list[str]:
    """The kinds (``KINDS``) of one change, mechanically: character classes from the project's leet and
    confusables tables and Unicode decomposition, then an edit alignment on letters. A change needing two
    or more edits is ``other`` (with its character kinds). Extra copies of a letter make its run
    ``doubled`` (a letter written twice where the word has it once) or ``stretched`` (a run of three or
    more); censor characters standing for one letter count as ``censor`` only."""
    clean = "".join(c for c in clean_word.lower() if c.isalnum())
    if perturbed_word.lower() == clean_word.lower():
        return ["case"]
    # Sentence punctuation at the end ("fag behaviour." -> "fagbehaviour.") is not part of the change.
    clean_word, perturbed_word = clean_word.rstrip(".,!?;:"), perturbed_word.rstrip(".,!?;:")
    kinds: set[str] = set()
    slots = _slots(perturbed_word, kinds)
    if len(clean_word.split()) > len(perturbed_word.split()):
        kinds.add("joined")
        if all(len(piece) > 1 for piece in perturbed_word.split()):
            kinds.discard("spacing")  # the spaces left are the ones between words ("Ihate women")
    ops = _align(slots, clean)
    edits = [op for op, _, _ in ops if op not in ("match", "extra")]
    if len(edits) > 1:
        kinds.add("other")
    else:
        kinds.update(edits)
        extra: dict[int, int] = {}  # run start in clean -> extra copies of its letter
        for op, i, j in ops:
            if op == "extra" and slots[i] != string.ascii_lowercase:  # a censor or unmapped slot: not a copy
                start = j - 1
                while start > 0 and clean[start - 1] == clean[j - 1]:
                    start -= 1
                extra[start] = extra.get(start, 0) + 1
        for start, count in extra.items():
            end = start
            while end < len(clean) and clean[end] == clean[start]:
                end += 1
            run = end - start
            kinds.add("stretched" if run + count >= 3 else "doubled")
    return [k for k in KINDS if k in kinds] or ["other"]


# --- JavaScript baselines ---------------------------------------------------------------------------------

def install_js_filters() -> str:
    """``npm ci`` of ``bench/js_filters``' pinned packages into ``JS_MODULES``; returns what npm printed.

    Raises ``RuntimeError`` when npm is missing or fails."""
    npm = shutil.which("npm")
    if npm is None:
        raise RuntimeError("npm not found on PATH")
    JS_MODULES.mkdir(parents=True, exist_ok=True)
    for name in ("package.json", "package-lock.json"):
        shutil.copyfile(JS_DIR / name, JS_MODULES / name)
    done = subprocess.run([npm, "ci", "--ignore-scripts", "--no-audit", "--no-fund"], cwd=JS_MODULES,
                          capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"npm ci failed ({done.returncode}): {done.stderr.strip()[-2000:]}")
    return done.stdout.strip()


def js_flags(texts: list[str]) -> dict:
    """``{filter: {"version", "flags": [bool per text]}}`` from ``check.mjs``, or ``{"skipped": why}`` when
    node or the installed modules are missing (the benchmark goes on without them)."""
    node = shutil.which("node")
    if node is None:
        return {"skipped": "node not found on PATH"}
    if not (JS_MODULES / "node_modules").is_dir():
        return {"skipped": f"no modules in {JS_MODULES} (run: python bench/obfuscation.py --install-js-filters)"}
    done = subprocess.run([node, str(JS_DIR / "check.mjs"), str(JS_MODULES)], input=json.dumps(texts),
                          capture_output=True, text=True)
    if done.returncode != 0:
        return {"skipped": f"check.mjs failed ({done.returncode}): {done.stderr.strip()[-500:]}"}
    return json.loads(done.stdout)
