"""Write ``guardrail/matching/data/unicode_categories.json``: the code points Python's ``re`` matches with ``\\w``,
``\\d`` and ``\\s`` (``str`` patterns), as ranges, per Unicode version of the Python that runs this script.

``guardrail/matching/charset.py`` reads the entry of the running Python's ``unicodedata.unidata_version`` instead
of scanning every code point at first use (~40 ms of a fresh process's first artefact load, which
``guardrail compile`` pays once per run), and computes the sets itself for a version the file lacks.
Stdlib only, so every interpreter can run it; run it once per interpreter to add its version::

    for v in 3.10 3.11 3.12 3.13; do python$v scripts/gen_unicode_categories.py; done
"""

from __future__ import annotations

import json
import re
import sys
import unicodedata
from pathlib import Path

OUT = Path(__file__).resolve().parents[1] / "guardrail" / "matching" / "data" / "unicode_categories.json"
CODE_POINTS = 0x110000
CATEGORIES = (r"\w", r"\d", r"\s")


def ranges(category: str) -> list[list[int]]:
    every = "".join(map(chr, range(CODE_POINTS)))
    return [[m.start(), m.end() - 1] for m in re.finditer(category + "+", every)]


def main() -> None:
    data = json.loads(OUT.read_text(encoding="utf-8")) if OUT.is_file() else {
        "format": 1, "source": "Python's re (Modules/_sre/sre.c, SRE_UNI_IS_*) per unicodedata.unidata_version, "
        "scripts/gen_unicode_categories.py", "versions": {}}
    data["versions"][unicodedata.unidata_version] = {c: ranges(c) for c in CATEGORIES}
    data["versions"] = dict(sorted(data["versions"].items(), key=lambda kv: tuple(map(int, kv[0].split(".")))))
    OUT.write_text(json.dumps(data, separators=(",", ":")) + "\n", encoding="utf-8")
    print(f"{OUT}: Unicode {unicodedata.unidata_version} (Python {sys.version.split()[0]})")


if __name__ == "__main__":
    main()
