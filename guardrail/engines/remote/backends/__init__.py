"""The upstream server APIs the gateway drives, one module each, and the choice between them at start-up.

``GUARDRAIL_UPSTREAM_API``: ``vllm`` (:mod:`.vllm`: vLLM's OpenAI server), ``llamacpp`` (:mod:`.llamacpp`:
llama.cpp's ``llama-server``), or ``auto`` (default): read from ``/v1/models``, which both list models in —
``owned_by: "llamacpp"`` is llama.cpp's server, ``owned_by: "vllm"`` vLLM's. Any other server is driven as vLLM's
API, whose start-up check then refuses it naming the capability it lacks; llama-cpp-python's server (its own
FastAPI app) is named in the refusal: it takes text prompts and streams text, never token ids, so the gateway
cannot see every token it decodes.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

import httpx

from guardrail.engines.remote.backends.base import Piece, Submission, UpstreamAPI, WithheldTokens
from guardrail.engines.remote.backends.llamacpp import LlamaCppAPI
from guardrail.engines.remote.backends.vllm import LOGITS_PROCESSOR_MODES, VLLMAPI
from guardrail.engines.remote.client import UpstreamClient, UpstreamError
from guardrail.engines.remote.upstream import (
    SAMPLE_TEXTS,
    UpstreamInfo,
    UpstreamMismatch,
    list_models,
    pick_model,
)

__all__ = ["API_NAMES", "LOGITS_PROCESSOR_MODES", "Piece", "Submission", "UpstreamAPI", "WithheldTokens", "api_named",
           "connect", "detect"]

log = logging.getLogger("guardrail.engines.remote")
#: ``GUARDRAIL_UPSTREAM_API`` values.
API_NAMES = ("auto", "vllm", "llamacpp")
_APIS: dict[str, type] = {"vllm": VLLMAPI, "llamacpp": LlamaCppAPI}
#: The title llama-cpp-python's FastAPI server gives its OpenAPI schema (llama_cpp/server/app.py).
_LLAMA_CPP_PYTHON_TITLE = "llama.cpp Python API"


def api_named(name: str, logits_processor: str = "auto") -> UpstreamAPI:
    """The API ``name`` (``vllm``, ``llamacpp``).

    Args:
        logits_processor: one of :data:`LOGITS_PROCESSOR_MODES` (guardrail's vLLM logits processor on the
            upstream: vLLM's server only).

    Raises:
        ValueError: another name or mode; ``logits_processor="on"`` with an API other than vLLM's.
    """
    if name not in _APIS:
        raise ValueError(f"upstream API must be one of {API_NAMES}, got {name!r}")
    if name == "vllm":
        return VLLMAPI(logits_processor)
    if logits_processor not in LOGITS_PROCESSOR_MODES:
        raise ValueError(f"upstream logits processor must be one of {LOGITS_PROCESSOR_MODES}, "
                         f"got {logits_processor!r}")
    if logits_processor == "on":
        raise ValueError(f"upstream logits processor 'on' needs vLLM's server; the upstream API is {name!r}")
    return _APIS[name]()


def detect(client: UpstreamClient, card: dict[str, Any]) -> str:
    """The API of the upstream whose ``/v1/models`` lists ``card``: ``llamacpp`` or ``vllm``.

    Raises:
        UpstreamMismatch: llama-cpp-python's server (text only: it cannot be guarded).
    """
    owner = card.get("owned_by")
    if owner == "llamacpp":
        return "llamacpp"
    if owner == "sglang":
        # Its /v1/completions and /tokenize take vLLM's bodies, so vLLM's adapter and check apply; the pair has
        # never run against a real SGLang server (docs/engines.md, "SGLang"): say so where operators look.
        log.warning("upstream is SGLang: driven through vLLM's API adapter, untested against a real SGLang "
                    "server (docs/engines.md, SGLang)", extra={"upstream": client.base_url})
        return "vllm"
    if owner != "vllm" and _is_llama_cpp_python(client):
        raise UpstreamMismatch(
            f"upstream {client.base_url} is llama-cpp-python's server: its /v1/completions takes text prompts and "
            "streams text, never token ids, so the gateway cannot see every token it decodes; run llama.cpp's "
            "llama-server on the same GGUF instead (GUARDRAIL_UPSTREAM_API=llamacpp, docs/engines.md)")
    return "vllm"


def _is_llama_cpp_python(client: UpstreamClient) -> bool:
    try:
        schema = client.get_json("/openapi.json")
    except (httpx.HTTPError, UpstreamError):
        return False  # no FastAPI schema: not that server
    title = ((schema.get("info") or {}).get("title") or "") if isinstance(schema, dict) else ""
    return _LLAMA_CPP_PYTHON_TITLE in str(title)


def connect(client: UpstreamClient, tokenizer: Any, model: str | None = None, api: str = "auto",
            samples: Sequence[str] = SAMPLE_TEXTS,
            logits_processor: str = "auto") -> tuple[UpstreamAPI, UpstreamInfo]:
    """Pick the upstream's API (``api``; ``auto``: :func:`detect`) and run its start-up check.

    Args:
        model: the upstream model id to use (default: the first ``/v1/models`` lists).
        logits_processor: see :func:`api_named`.

    Raises:
        UpstreamMismatch: unreachable; no model, or not ``model``; llama-cpp-python's server under ``auto``;
            the API's own check (another tokenizer, no token ids in or out, bans not honoured).
        ValueError: ``api`` is not one of :data:`API_NAMES`; see :func:`api_named`.
    """
    if api not in API_NAMES:
        raise ValueError(f"upstream API must be one of {API_NAMES}, got {api!r}")
    card = pick_model(client.base_url, list_models(client), model)
    chosen = api_named(detect(client, card) if api == "auto" else api, logits_processor)
    return chosen, chosen.check(client, tokenizer, card, samples)
