"""What a request asks its answer to be: OpenAI's ``response_format`` (and vLLM's ``guided_json``), parsed
once and engine-neutral (no grammar engine is imported here; :mod:`guardrail.grammar.matcher` compiles it).

Shapes accepted (OpenAI's API reference, "Structured Outputs")::

    {"type": "text"}                                        -> None (free text)
    {"type": "json_object"}                                 -> any JSON object
    {"type": "json_schema", "json_schema": {"name": "person", "schema": {...}, "strict": true}}

``strict`` is accepted and recorded; the grammar is enforced either way (as vLLM does): the answer always
follows the schema, up to the limits in docs/structured-output.md.

Beyond JSON, a request may carry a whole grammar in llguidance's Lark dialect (kind ``lark``, built by the service
for tool calls: the call's markup, one of the declared names and arguments that follow that tool's
``parameters``, each as an inline ``%json`` schema laid out by :data:`JSON_LAYOUT`; docs/structured-output.md,
"Tool calls").
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

#: The schema a ``json_object`` request is held to: any JSON object (OpenAI's JSON mode).
ANY_OBJECT = '{"type":"object"}'
#: The field every error message names first (the SamplingParams field and the request field).
FIELD = "response_format"
#: How generated JSON is laid out: one space after ``,`` and ``:``, no other whitespace (llguidance's JSON
#: options, given to its compiler for a schema and as the ``x-guidance`` key of a Lark grammar's ``%json``).
#: Fixed separators keep a small model from looping on whitespace (llguidance's flexible default allows any run
#: of it), and these are the ones ``json.dumps`` writes, which models have seen most.
JSON_LAYOUT: dict[str, Any] = {"whitespace_flexible": False, "item_separator": ", ", "key_separator": ": "}

StructuredKind = Literal["json_object", "json_schema", "lark"]


@dataclass(frozen=True)
class StructuredOutput:
    """A JSON answer the decoder must produce.

    Attributes:
        kind: ``"json_object"`` (any object), ``"json_schema"``, or ``"lark"`` (a grammar in llguidance's Lark
            dialect: :meth:`from_lark`).
        schema: the JSON schema as compact JSON text (sorted keys: equal schemas compare and hash equal,
            so compiled grammars can be cached by it); for ``lark``, the grammar's text.
        name: ``json_schema.name`` (informational).
        strict: ``json_schema.strict`` as given (``None``: not given); enforced either way.
    """

    kind: StructuredKind
    schema: str
    name: str | None = None
    strict: bool | None = None

    @classmethod
    def from_schema(cls, schema: Mapping[str, Any] | bool | str, kind: StructuredKind = "json_schema",
                    name: str | None = None, strict: bool | None = None, field: str = FIELD) -> StructuredOutput:
        """From a JSON schema (an object, ``true``, or its JSON text).

        Raises:
            ValueError: ``{field}: ...`` when the schema is not a JSON object or ``true`` (or its text is not JSON).
        """
        if isinstance(schema, str):
            try:
                schema = json.loads(schema)
            except ValueError as exc:
                raise ValueError(f"{field}: the schema is not valid JSON ({exc})") from None
        if not isinstance(schema, (Mapping, bool)):
            raise ValueError(f"{field}: the schema must be a JSON object, got {type(schema).__name__}")
        if schema is False:
            raise ValueError(f"{field}: the schema false admits no value")
        if schema is True:
            schema = {}  # JSON Schema's `true`: any value
        return cls(kind, json.dumps(schema, sort_keys=True, separators=(",", ":"), ensure_ascii=False), name, strict)

    @classmethod
    def from_lark(cls, grammar: str, name: str | None = None) -> StructuredOutput:
        """A grammar in llguidance's Lark dialect (its docs/syntax.md), e.g. from :func:`lark_json`; compiled and
        checked by :func:`guardrail.grammar.matcher.compile_grammar` (a ``ValueError`` there when it does not
        compile)."""
        return cls("lark", grammar, name)

    @classmethod
    def from_response_format(cls, value: Mapping[str, Any] | None) -> StructuredOutput | None:
        """Parse OpenAI's ``response_format``; ``None`` for free text.

        Raises:
            ValueError: ``response_format: ...`` for an unknown ``type``, a ``json_schema`` without its
                ``json_schema.schema`` object, or a ``name`` / ``strict`` of the wrong type.
        """
        if value is None:
            return None
        if not isinstance(value, Mapping):
            raise ValueError(f"{FIELD}: must be an object, got {type(value).__name__}")
        kind = value.get("type", "text")
        if kind == "text":
            return None
        if kind == "json_object":
            return cls("json_object", ANY_OBJECT)
        if kind != "json_schema":
            raise ValueError(f"{FIELD}: type must be 'text', 'json_object' or 'json_schema', got {kind!r}")
        spec = value.get("json_schema")
        if not isinstance(spec, Mapping):
            raise ValueError(f"{FIELD}: type 'json_schema' needs a json_schema object "
                             '({"name": ..., "schema": {...}, "strict": ...})')
        name, strict = spec.get("name"), spec.get("strict")
        if name is not None and not isinstance(name, str):
            raise ValueError(f"{FIELD}: json_schema.name must be a string, got {type(name).__name__}")
        if strict is not None and not isinstance(strict, bool):
            raise ValueError(f"{FIELD}: json_schema.strict must be a boolean, got {type(strict).__name__}")
        schema = spec.get("schema", {"type": "object"})  # OpenAI: schema is optional (any object then)
        if not isinstance(schema, (Mapping, bool)):
            raise ValueError(f"{FIELD}: json_schema.schema must be a JSON object, got {type(schema).__name__}")
        return cls.from_schema(schema, "json_schema", name, strict)

    def schema_object(self) -> Any:
        """The schema as a Python object (``dict`` or ``bool``).

        Raises:
            ValueError: for a ``lark`` grammar (it has no JSON schema).
        """
        if self.kind == "lark":
            raise ValueError(f"{FIELD}: a Lark grammar has no JSON schema")
        return json.loads(self.schema)


def lark_json(schema: Mapping[str, Any] | bool) -> str:
    """An inline JSON schema for a Lark grammar (llguidance's ``%json {...}``), laid out as :data:`JSON_LAYOUT`
    (its ``x-guidance`` key: llguidance reads it at the top of each inline schema). ``true`` (any value) is
    ``{}``.

    Raises:
        ValueError: ``false`` (no value matches) or a schema that is not an object.
    """
    if schema is True:
        schema = {}
    if not isinstance(schema, Mapping):
        raise ValueError(f"a JSON schema must be an object or true, got {schema!r}")
    return "%json " + json.dumps({**schema, "x-guidance": JSON_LAYOUT}, ensure_ascii=False, separators=(",", ":"))
