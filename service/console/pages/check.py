"""The check playground: a text scanned with ``POST /v1/check`` (the lists and level picked, the request's own
terms), every match highlighted with its term, list and the levels that catch it. Which levels catch a form is
asked of the API too: the same text once per obfuscation level (:data:`LEVELS`), a match being caught at a level
when that scan reports the same span, list and term."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any

from starlette.responses import Response

from service.console.api import Api, ApiError
from service.console.context import Page, error_text, signed_in
from service.console.forms import lines

#: The obfuscation levels compared, each catching what the one before does (docs/matching.md).
LEVELS = ("off", "homoglyphs", "leet", "spaced", "masked", "masked+markup")


@dataclass(frozen=True)
class Segment:
    """A run of the text: plain, or covered by the matches numbered ``marks`` (1-based)."""

    text: str
    marks: tuple[int, ...] = ()


def segments(text: str, matches: list[dict[str, Any]]) -> list[Segment]:
    """``text`` cut at every match boundary (spans in code points; matches may overlap)."""
    cuts = sorted({0, len(text), *(m["start"] for m in matches), *(m["end"] for m in matches)})
    out = []
    for start, end in zip(cuts, cuts[1:]):
        marks = tuple(i + 1 for i, m in enumerate(matches) if m["start"] <= start and end <= m["end"])
        out.append(Segment(text[start:end], marks))
    return out


def _key(match: dict[str, Any]) -> tuple[int, int, str, str | None]:
    return match["start"], match["end"], match["list"], match["term"]


async def _scan(api: Api, body: dict[str, Any]) -> tuple[dict[str, Any] | None, ApiError | None]:
    answer = await api.call("POST", "/v1/check", json=body)
    return (answer.json(), None) if answer.is_success else (None, ApiError.of(answer))


@signed_in()
async def playground(page: Page) -> Response:
    index, _ = await page.api.get_json("/admin/wordlists")
    available = (index or {}).get("data", [])
    form = page.form
    chosen = form.getlist("wordlists") if page.request.method == "POST" else [w["name"] for w in available
                                                                                    if w["default"]]
    context: dict[str, Any] = {"available": available, "chosen": chosen, "levels": LEVELS, "result": None,
                               "error": None, "text": form.get("text", ""), "terms": form.get("terms", ""),
                               "level": form.get("level", "")}
    if page.request.method == "POST":
        body: dict[str, Any] = {"text": context["text"], "wordlists": chosen}
        terms = lines(context["terms"])
        if terms:
            body["banned_terms"] = terms
        asked = {**body, **({"obfuscation": context["level"]} if context["level"] else {})}
        scans = await asyncio.gather(_scan(page.api, asked), *(_scan(page.api, {**body, "obfuscation": level})
                                                                for level in LEVELS))
        result, failure = scans[0]
        if failure is not None:
            context["error"] = error_text(failure)
            return page.render("check.html", failure.status, title="Check playground", **context)
        assert result is not None
        caught = {level: ({_key(m) for m in found["matches"]} if found is not None else None)
                  for level, (found, _) in zip(LEVELS, scans[1:])}
        matches = result["matches"]
        for match in matches:
            match["levels"] = {level: (None if keys is None else _key(match) in keys) for level, keys in caught.items()}
            match["lowest"] = next((level for level in LEVELS if match["levels"][level]), None)
        context["result"] = {**result, "segments": segments(context["text"], matches),
                             "refused": [level for level, keys in caught.items() if keys is None]}
    return page.render("check.html", title="Check playground", **context)
