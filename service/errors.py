"""Errors in OpenAI's JSON shape: ``{"error": {"message", "type", "param", "code"}}``, for every 4xx/5xx.

The official ``openai`` client maps the status to its exception classes and reads ``error.message``;
``param`` names the offending request field (``"messages.0.content"``, ``"logit_bias"``, ``"If-Match"``).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

log = logging.getLogger("guardrail.service")

_TYPE_BY_STATUS = {
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    409: "conflict_error",
    429: "rate_limit_error",
    503: "service_unavailable",
}


def error_type(status: int) -> str:
    """OpenAI-style ``error.type`` for an HTTP status."""
    if status in _TYPE_BY_STATUS:
        return _TYPE_BY_STATUS[status]
    return "server_error" if status >= 500 else "invalid_request_error"


def error_body(
    message: str, *, status: int, param: str | None = None, code: str | None = None, type_: str | None = None
) -> dict[str, Any]:
    """The JSON body of an error (also sent as the last SSE event of a stream that failed).

    ``type_`` overrides the type derived from ``status`` (OpenAI answers an unknown model with 404 and
    ``invalid_request_error``).
    """
    return {"error": {"message": message, "type": type_ or error_type(status), "param": param, "code": code}}


class ApiError(Exception):
    """An error answered to the client with ``status`` and the OpenAI error body.

    Args:
        status: HTTP status code (4xx or 5xx).
        message: human-readable explanation; never contains prompt text.
        param: the request field at fault, if any.
        code: a stable machine-readable code (``"model_not_found"``, ``"queue_full"``).
        headers: extra response headers (``Retry-After``, ``WWW-Authenticate``, ``ETag``).
        type_: ``error.type`` when it is not the one of ``status`` (:func:`error_type`).
    """

    def __init__(
        self,
        status: int,
        message: str,
        *,
        param: str | None = None,
        code: str | None = None,
        headers: Mapping[str, str] | None = None,
        type_: str | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.param = param
        self.code = code
        self.headers = dict(headers or {})
        self.type = type_

    def response(self) -> JSONResponse:
        return JSONResponse(
            error_body(self.message, status=self.status, param=self.param, code=self.code, type_=self.type),
            status_code=self.status,
            headers=self.headers,
        )


def field_path(loc: Sequence[int | str]) -> str | None:
    """``("body", "messages", 0, "content")`` -> ``"messages.0.content"``; headers keep their HTTP name."""
    parts = list(loc)
    if parts and parts[0] in {"body", "query", "path", "header", "cookie"}:
        source = parts.pop(0)
        if source == "header" and parts:
            return "-".join(word.capitalize() for word in str(parts[0]).replace("_", "-").split("-"))
    # Inside a union, pydantic adds the member's tag to the location ("terms.0.constrained-str",
    # "terms.0.TermIn.match"); field names are snake_case, so tags are recognisable.
    parts = [p for p in parts if not (isinstance(p, str) and _is_union_tag(p))]
    return ".".join(str(p) for p in parts) or None


_SCALAR_TAGS = frozenset({"str", "int", "float", "bool", "list", "dict", "none"})
# Errors that only say "this union member does not fit": less telling than the member that nearly did.
_MISMATCH_TYPES = frozenset({"string_type", "int_type", "float_type", "bool_type", "list_type", "dict_type",
                             "model_type", "model_attributes_type", "none_required"})


def _is_union_tag(part: str) -> bool:
    return part in _SCALAR_TAGS or "-" in part or "[" in part or part[:1].isupper()


def validation_response(exc: RequestValidationError) -> JSONResponse:
    """A request body that failed validation as a 400 in OpenAI's error shape, ``param`` naming the first failing
    field (``/v1/messages`` rewraps it in Anthropic's)."""
    errors = exc.errors()
    shown = [e for e in errors if e.get("type") not in _MISMATCH_TYPES] or errors
    first = shown[0] if shown else {}
    param = field_path(first.get("loc", ()))
    described = []
    for err in shown[:5]:
        where = field_path(err.get("loc", ()))
        described.append(f"{where}: {err.get('msg')}" if where else str(err.get("msg")))
    message = "Invalid request: " + "; ".join(described)
    if len(shown) > 5:
        message += f" (and {len(shown) - 5} more)"
    # 400, not FastAPI's 422: OpenAI and vLLM answer 400, which the official client raises as BadRequestError.
    return JSONResponse(error_body(message, status=400, param=param, code="invalid_value"), status_code=400)


def install_error_handlers(app: FastAPI) -> None:
    """Answer every error raised in a route (and unknown routes, bad methods) in the OpenAI shape."""

    @app.exception_handler(ApiError)
    async def _api_error(_: Request, exc: ApiError) -> JSONResponse:
        return exc.response()

    @app.exception_handler(RequestValidationError)
    async def _invalid(_: Request, exc: RequestValidationError) -> JSONResponse:
        return validation_response(exc)

    @app.exception_handler(StarletteHTTPException)
    async def _http(_: Request, exc: StarletteHTTPException) -> JSONResponse:
        message = exc.detail if isinstance(exc.detail, str) else str(exc.detail)
        return JSONResponse(
            error_body(message, status=exc.status_code),
            status_code=exc.status_code,
            headers=getattr(exc, "headers", None),
        )

    @app.exception_handler(Exception)
    async def _unexpected(_: Request, exc: Exception) -> JSONResponse:
        log.exception("unhandled error", extra={"error_class": type(exc).__name__})
        return JSONResponse(error_body("Internal server error.", status=500), status_code=500)


ERROR_SCHEMA: dict[str, Any] = {
    "title": "Error",
    "type": "object",
    "required": ["error"],
    "properties": {"error": {
        "type": "object",
        "required": ["message", "type", "param", "code"],
        "properties": {"message": {"type": "string"}, "type": {"type": "string"},
                       "param": {"type": ["string", "null"]}, "code": {"type": ["string", "null"]}},
    }},
}


def documented_errors(**descriptions: str) -> dict[int | str, dict[str, Any]]:
    """OpenAPI ``responses`` entries in the error shape: ``documented_errors(e404="Unknown model.")``."""
    return {int(key.removeprefix("e")): {
        "description": text,
        "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}},
    } for key, text in descriptions.items()}


def openapi_with_400(schema: dict[str, Any]) -> dict[str, Any]:
    """FastAPI documents validation errors as 422 ``HTTPValidationError``; this service answers them with
    400 in OpenAI's error shape: rewrite every operation's 422 response accordingly (in place)."""
    schema.setdefault("components", {}).setdefault("schemas", {})["Error"] = ERROR_SCHEMA
    for operations in schema.get("paths", {}).values():
        for operation in operations.values():
            responses = operation.get("responses", {})
            if responses.pop("422", None) is not None:
                responses.setdefault("400", {
                    "description": "Invalid request: `error.param` names the field",
                    "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}},
                })
    for name in ("HTTPValidationError", "ValidationError"):
        schema["components"]["schemas"].pop(name, None)
    return schema
