"""Size limits of the JSON schemas and grammars a request sends (``response_format``, ``guided_json``,
``text.format``, ``output_config.format``, a tool's ``parameters`` / ``input_schema``).

A schema is compiled into a grammar that embeds it and is cached (:mod:`guardrail.grammar.matcher`); one padded
with a 4 MB ``description`` cost ~60 MB of server memory apiece before these limits. So a schema is refused with
a 400 naming its field beyond ``GUARDRAIL_MAX_SCHEMA_BYTES`` (compact JSON, or the grammar's text),
``GUARDRAIL_MAX_SCHEMA_DEPTH`` (nested objects and arrays) or ``GUARDRAIL_MAX_SCHEMA_PROPERTIES`` (object keys,
all levels together), before anything compiles it (docs/service.md, "Limits").
"""

from __future__ import annotations

import json
from typing import Any

from guardrail.grammar.format import StructuredOutput
from service.errors import ApiError
from service.settings import Settings


def check_schema(schema: Any, param: str, settings: Settings, text: str | None = None) -> None:
    """Refuse ``schema`` (a parsed JSON schema) beyond the server's schema limits.

    Args:
        schema: the schema as parsed JSON (dict, list, scalars).
        param: the request field that carries it (``tools.2.function.parameters``).
        text: its JSON text when the caller has it (else it is serialised compactly to be measured).

    Raises:
        ApiError: 400 ``schema_too_large`` naming ``param`` and the limit passed.
    """
    size = len((text if text is not None else json.dumps(schema, separators=(",", ":"))).encode())
    if size > settings.max_schema_bytes:
        raise _too_large(param, f"{size} bytes exceed the limit of {settings.max_schema_bytes} "
                         "(GUARDRAIL_MAX_SCHEMA_BYTES)")
    properties = 0
    stack: list[tuple[Any, int]] = [(schema, 1)]
    while stack:  # iterative: a deep schema cannot exhaust the interpreter's stack
        node, depth = stack.pop()
        if isinstance(node, dict):
            children: Any = node.values()
            properties += len(node)
        elif isinstance(node, list):
            children = node
        else:
            continue
        if depth > settings.max_schema_depth:
            raise _too_large(param, f"nested deeper than the limit of {settings.max_schema_depth} levels "
                             "(GUARDRAIL_MAX_SCHEMA_DEPTH)")
        if properties > settings.max_schema_properties:
            raise _too_large(param, f"more than the limit of {settings.max_schema_properties} object keys "
                             "(GUARDRAIL_MAX_SCHEMA_PROPERTIES)")
        stack.extend((child, depth + 1) for child in children)


def check_structured_output(structured: StructuredOutput, param: str, settings: Settings) -> None:
    """:func:`check_schema` for a request's structured output (a Lark grammar: its text's bytes only).

    Raises:
        ApiError: 400 ``schema_too_large`` naming ``param``.
    """
    if structured.kind == "lark":
        size = len(structured.schema.encode())
        if size > settings.max_schema_bytes:
            raise _too_large(param, f"{size} bytes exceed the limit of {settings.max_schema_bytes} "
                             "(GUARDRAIL_MAX_SCHEMA_BYTES)")
        return
    check_schema(structured.schema_object(), param, settings, text=structured.schema)


def _too_large(param: str, why: str) -> ApiError:
    return ApiError(400, f"{param}: the schema is too large: {why}", param=param, code="schema_too_large")
