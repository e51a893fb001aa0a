"""Generate the chart's README.md from the ``# --`` comments of its values.yaml (helm-docs conventions).

helm-docs (a Go binary) is not on PyPI or npm, so this script does the part the chart needs: a comment block
that starts with ``# -- `` right above a key documents that key (its later ``#`` lines continue the text; a
``# @default -- TEXT`` line replaces the shown default); the table lists every documented key with its dotted
path, type and default (JSON of the value in values.yaml). The page around the table is
``helm/README.template.md``, where ``{{ values_table }}`` and ``{{ chart.* }}`` fields are replaced.

    python helm/generate_readme.py           rewrite helm/guardrail/README.md
    python helm/generate_readme.py --check   exit 1 when README.md is not what the values say (CI)

Needs PyYAML only. tests/helm/test_helm.py runs ``--check`` and also requires every leaf value to be documented
(itself or through a documented parent).
"""

from __future__ import annotations

import json
import re
import sys
from dataclasses import dataclass
from pathlib import Path

import yaml

HERE = Path(__file__).resolve().parent
CHART = HERE / "guardrail"
VALUES = CHART / "values.yaml"
TEMPLATE = HERE / "README.template.md"
README = CHART / "README.md"

_KEY = re.compile(r"^(?P<indent> *)(?P<key>[A-Za-z0-9_][A-Za-z0-9_.-]*):(?:\s|$)")
_COMMENT = re.compile(r"^ *# ?(?P<text>.*)$")


@dataclass
class Documented:
    path: str
    description: str
    default: str | None  # from ``# @default --``; None: the value itself


def documented_keys(text: str) -> list[Documented]:
    """The keys of ``text`` (a values.yaml) that carry a ``# --`` comment, in file order.

    Keys inside list items are not tracked (a list is documented as a whole by the key holding it).
    """
    found: list[Documented] = []
    stack: list[tuple[int, str]] = []
    pending: list[str] | None = None
    default: str | None = None
    for line in text.splitlines():
        stripped = line.strip()
        if not stripped:
            pending, default = None, None
            continue
        comment = _COMMENT.match(line)
        if comment:
            body = comment.group("text")
            if body.startswith("-- "):
                pending, default = [body[3:].strip()], None
            elif pending is not None and body.startswith("@default -- "):
                default = body[len("@default -- "):].strip()
            elif pending is not None and default is None:
                pending.append(body.strip())
            continue
        key = _KEY.match(line)
        if key is None or stripped.startswith("-"):
            pending, default = None, None
            continue
        indent = len(key.group("indent"))
        while stack and stack[-1][0] >= indent:
            stack.pop()
        path = ".".join([*(name for _, name in stack), key.group("key")])
        stack.append((indent, key.group("key")))
        if pending is not None:
            found.append(Documented(path, " ".join(part for part in pending if part), default))
        pending, default = None, None
    return found


def lookup(values: dict, path: str) -> object:
    node: object = values
    for part in path.split("."):
        assert isinstance(node, dict), path
        node = node[part]
    return node


def type_name(value: object) -> str:
    if value is None:
        return "null"
    return {bool: "bool", int: "int", float: "float", str: "string", list: "list", dict: "object"}[type(value)]


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def values_table(text: str) -> str:
    values = yaml.safe_load(text)
    rows = ["| Key | Type | Default | Description |", "|-----|------|---------|-------------|"]
    for item in documented_keys(text):
        value = lookup(values, item.path)
        default = item.default if item.default is not None else f"`{json.dumps(value, separators=(',', ':'))}`"
        rows.append(f"| {item.path} | {type_name(value)} | {_cell(default)} | {_cell(item.description)} |")
    return "\n".join(rows)


def render() -> str:
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text(encoding="utf-8"))
    page = TEMPLATE.read_text(encoding="utf-8")
    page = page.replace("{{ values_table }}", values_table(VALUES.read_text(encoding="utf-8")))
    for field in ("name", "version", "appVersion", "description", "kubeVersion", "home"):
        page = page.replace("{{ chart." + field + " }}", str(chart.get(field, "")).strip())
    return page


def main(argv: list[str]) -> int:
    page = render()
    if "--check" in argv:
        if README.read_text(encoding="utf-8") != page:
            print(f"{README} is out of date: run python helm/generate_readme.py", file=sys.stderr)
            return 1
        return 0
    README.write_text(page, encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
