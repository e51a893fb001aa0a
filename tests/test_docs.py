"""Every repository path the docs name exists (README.md and docs/*.md), and the glossary's code names are the
code's.

A path is a backticked token or a link target whose first part is a folder of the repository (``guardrail/``,
``service/``, ``tests/``, ``bench/``, ``helm/``, ``docs/``, ``scripts/``, ``wordlists/``…) or of a package
(``matching/textmatch.py`` in a table about ``guardrail/``). It resolves from the repository root, from the
doc's folder (links), or from inside ``guardrail/``, ``service/`` or ``tests/``. A glob (``tests/service/*.py``)
must match a file; a placeholder (``<name>``, ``{model}``, ``…``) is not checked; ``path:line``,
``path::test`` and ``#anchor`` suffixes are dropped.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
#: Where a path may be written from besides the root (a module table under "guardrail/" names
#: ``matching/textmatch.py``).
BASES = ("", "guardrail", "service", "tests")
#: Names that look like paths and are not the repository's: URLs and routes (``/v1/check``), media types.
NOT_REPOSITORY = re.compile(r"://|^/|^[\w.-]+@|^(text|application|image|audio|video)/")
#: Paths named on purpose that are not in the repository, with why.
ELSEWHERE: dict[str, str] = {}

_BACKTICKED = re.compile(r"`([^`\n]+)`")
_LINK = re.compile(r"\]\(([^)\s]+)\)")
_PATH = re.compile(r"^\.{0,2}/?[\w.*-]+(?:/[\w.*-]*)+$")
_SUFFIX = re.compile(r"(?:::[\w\[\]-]+|:\d+(?:-\d+)?|#[\w-]*)$")


def _first_parts() -> frozenset[str]:
    """Folders a path may start with: the repository's top level and the packages' own folders."""
    parts = {p.name for p in ROOT.iterdir() if p.is_dir() and not p.name.startswith(".")}
    for base in BASES[1:]:
        parts |= {p.name for p in (ROOT / base).iterdir() if p.is_dir() and not p.name.startswith((".", "_"))}
    return frozenset(parts - {"node_modules"})


FIRST_PARTS = _first_parts()


def named_paths(text: str) -> list[str]:
    """The repository paths named in one line of a doc (see the module docstring): backticked tokens that
    look like repository paths, and every relative link target (``[vllm.md](vllm.md#anchor)``)."""
    found = []
    links = [_SUFFIX.sub("", t) for t in _LINK.findall(text) if not NOT_REPOSITORY.search(t) and not t.startswith("#")]
    for token in [*_BACKTICKED.findall(text)]:
        token = _SUFFIX.sub("", token.strip().rstrip(".,;:"))
        if not token or token in ELSEWHERE or NOT_REPOSITORY.search(token) or any(c in token for c in "<>{}…$ "):
            continue
        if not _PATH.match(token):
            continue
        first = token.lstrip("./").split("/", 1)[0]
        if first in FIRST_PARTS or token.startswith(("./", "../")):
            found.append(token)
    return found + [t for t in links if t and t not in found]


def resolves(path: str, doc: Path) -> bool:
    candidates = [doc.parent / path] + [ROOT / base / path for base in BASES]
    if "*" in path:
        return any(any(c.parent.glob(c.name)) if c.parent.is_dir() else False for c in candidates)
    return any(c.exists() for c in candidates)


def dead_paths(doc: Path) -> list[str]:
    """``doc:line: path`` for every path the doc names that does not exist."""
    dead = []
    in_code_block = False
    for number, line in enumerate(doc.read_text(encoding="utf-8").splitlines(), start=1):
        if line.lstrip().startswith("```"):
            in_code_block = not in_code_block
            continue
        if in_code_block:  # shell sessions and code: their paths are examples (a user's files, outputs)
            continue
        for path in named_paths(line):
            if not resolves(path, doc):
                name = doc.relative_to(ROOT) if doc.is_relative_to(ROOT) else doc.name
                dead.append(f"{name}:{number}: {path}")
    return dead


@pytest.mark.parametrize("doc", DOCS, ids=lambda d: str(d.relative_to(ROOT)))
def test_every_path_a_doc_names_exists(doc):
    assert dead_paths(doc) == []


def test_the_check_finds_a_dead_path(tmp_path):
    doc = tmp_path / "doc.md"
    doc.write_text("See `guardrail/matching/textmatch.py` and `guardrail/matching/nowhere.py`, [x](tests/nope.py),\n"
                   "[a](https://example.com/x) [b](#here) [c](gone.md#part) [d](test_docs.py)\n"
                   "`tests/service/*.py`, `tests/none/*.py`, `text/event-stream`, `bench/compile.py:12`,\n"
                   "`matching/textmatch.py`, `/console/ops` and `docs/<name>.md`.\n", encoding="utf-8")
    assert sorted(dead_paths(doc)) == ["doc.md:1: guardrail/matching/nowhere.py", "doc.md:1: tests/nope.py",
                                       "doc.md:2: gone.md", "doc.md:3: tests/none/*.py"]


def glossary_code_names() -> list[tuple[str, str]]:
    """``(term, name)`` for every code name the "in code" column of docs/design.md's glossary gives (identifiers
    and dotted names; calls' parentheses dropped)."""
    text = (ROOT / "docs" / "design.md").read_text(encoding="utf-8")
    section = text[text.index("## 11. Glossary"):]
    names = []
    for line in section.splitlines()[1:]:
        if line.startswith("## "):
            break
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) < 3 or cells[0] in ("term", "---"):
            continue
        for token in _BACKTICKED.findall(cells[2]):
            token = re.sub(r"\(.*\)$", "", token.strip())
            if re.fullmatch(r"[A-Za-z_][\w]*(\.[A-Za-z_]\w*)*", token):
                names.append((cells[0], token.rsplit(".", 1)[-1]))
    return names


def test_the_glossary_names_what_the_code_calls_things():
    """Every code name in the glossary is a name in guardrail/ or service/ (one name per concept, as in the code)."""
    source = "\n".join(p.read_text(encoding="utf-8") for base in ("guardrail", "service")
                       for p in (ROOT / base).rglob("*.py"))
    names = glossary_code_names()
    assert len(names) > 50
    assert [(term, name) for term, name in names if not re.search(rf"\b{re.escape(name)}\b", source)] == []
