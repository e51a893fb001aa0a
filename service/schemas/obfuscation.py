"""The obfuscation setting as the service's edges take it (request bodies, tenant policies, settings).

Parsed once here (:meth:`~guardrail.wordlists.obfuscation.Obfuscation.parse`) into the typed value the layers
below pass on; a bad value is a validation error naming the field (a 400 with ``param: "obfuscation"`` on
requests) and the bad part. Written back as the canonical string (``masked+markup``) in JSON and OpenAPI.
"""

from __future__ import annotations

from typing import Annotated

from pydantic import BeforeValidator, PlainSerializer, WithJsonSchema

from guardrail.wordlists.obfuscation import DEFAULT_OBFUSCATION, OBFUSCATION_PATTERN, Obfuscation


def _parse(value: object) -> Obfuscation:
    if isinstance(value, Obfuscation):
        return value
    if not isinstance(value, str):
        raise ValueError(f"expected a string LEVEL or LEVEL+markup, got {type(value).__name__}")
    return Obfuscation.parse(value)


#: An obfuscation setting (docs/matching.md, "Obfuscation"), typed once validated.
ObfuscationSetting = Annotated[
    Obfuscation,
    BeforeValidator(_parse),
    PlainSerializer(str, return_type=str),
    WithJsonSchema({
        "type": "string", "pattern": OBFUSCATION_PATTERN, "examples": ["masked+markup", "spaced", "off"],
        "description": "Which obfuscated forms of the terms also match: off, homoglyphs (look-alike letters, "
        "accents, invisible characters), leet (+ leetspeak), spaced (+ separated and stretched letters), masked "
        "(+ one censor character), each optionally with +markup (HTML tags and references, markdown emphasis). "
        "Lists and terms that set their own keep it. Omitted = the API key's, else the server's "
        f"(GUARDRAIL_OBFUSCATION, default {DEFAULT_OBFUSCATION}).",
    }),
]
