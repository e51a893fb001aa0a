"""Reading the console's forms into API bodies."""

from __future__ import annotations

from typing import Any

from starlette.datastructures import ImmutableMultiDict


def term_item(form: ImmutableMultiDict) -> tuple[dict[str, Any], str | None]:
    """A term to add, as the API takes it (``{"text", "match", "case_sensitive", "obfuscation"}``; an option left
    at "the default" is left out, so the API's default applies), and a problem to show next to the field (an
    empty term), else None. Everything else about the term is the API's to judge (its 400 names the term)."""
    text = (form.get("text") or "").strip()
    item: dict[str, Any] = {"text": text, "case_sensitive": form.get("case_sensitive") == "on"}
    if form.get("match"):
        item["match"] = form.get("match")
    if form.get("obfuscation"):
        item["obfuscation"] = form.get("obfuscation")
    return item, None if text else "Enter a term."


def lines(value: str | None) -> list[str]:
    """The non-empty lines of a text area, stripped."""
    return [line.strip() for line in (value or "").splitlines() if line.strip()]
