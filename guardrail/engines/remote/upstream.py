"""The start-up check of an upstream: reachable, serving a model, the same tokenizer, token ids in and out.

The parts every API shares live here; what differs per server API (the tokenizer endpoint, the completion
probe) is in :mod:`guardrail.engines.remote.backends`.

A gateway that guarded another vocab than the upstream decodes would match the wrong bytes: every check
here fails with :class:`UpstreamMismatch`, naming what differs, and the service refuses to start.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import httpx

from guardrail.engines.remote.client import UpstreamClient, UpstreamError

__all__ = ["SAMPLE_TEXTS", "UpstreamInfo", "UpstreamMismatch", "check_upstream", "compare_tokenizers", "list_models",
           "pick_model"]

#: Texts both tokenizers must split into the same ids: prose, code, digits, whitespace runs, accents, CJK,
#: emoji (byte fallback), and text that looks like special tokens.
SAMPLE_TEXTS = (
    "The quick brown fox jumps over the lazy dog.",
    "def f(x):\n    return x ** 2  # squares\n\n",
    "1234567890 3.14159 -42 1e-9",
    "   leading spaces\t\ttabs\r\nand CRLF",
    "Ünïcödé façade naïve café — “quotes”",
    "日本語のテキストと中文",
    "emoji 🙂🚀 and symbols ∑∫√",
    "<|im_start|>user\nhi<|im_end|>",
)


class UpstreamMismatch(RuntimeError):
    """The upstream cannot be guarded by this service: unreachable, another tokenizer, or an API without a
    capability the gateway needs. The message names which."""


@dataclass(frozen=True)
class UpstreamInfo:
    """What the check learnt.

    Attributes:
        model: the model id requests name (``/v1/models``).
        max_model_len: the upstream's context, tokens (``None``: it does not say).
        api: the upstream's API (``"vllm"``, ``"llamacpp"``; :mod:`guardrail.engines.remote.backends`).
        logits_processor: guardrail's vLLM logits processor runs there and takes the bans (exact masks, a
            rollback in one request).
    """

    model: str
    max_model_len: int | None
    api: str = "vllm"
    logits_processor: bool = False


def check_upstream(client: UpstreamClient, tokenizer: Any, model: str | None = None,
                   samples: Sequence[str] = SAMPLE_TEXTS, api: str = "auto") -> UpstreamInfo:
    """Check ``client``'s upstream against ``tokenizer`` (a transformers tokenizer) through the API ``api``
    names (``auto``: detected); see :func:`guardrail.engines.remote.backends.connect`.

    Raises:
        UpstreamMismatch: as :func:`~guardrail.engines.remote.backends.connect`.
    """
    from guardrail.engines.remote.backends import connect  # the backends import this module's types

    return connect(client, tokenizer, model, api, samples)[1]


def list_models(client: UpstreamClient) -> list[dict[str, Any]]:
    """The cards ``GET /v1/models`` lists (vLLM and llama.cpp's server both serve it).

    Raises:
        UpstreamMismatch: unreachable, no such endpoint, or no model listed.
    """
    url = client.base_url
    try:
        listed = client.get_json("/v1/models")
    except httpx.HTTPError as exc:
        raise UpstreamMismatch(f"upstream {url} cannot be reached ({type(exc).__name__}: {exc})") from exc
    except UpstreamError as exc:
        raise UpstreamMismatch(f"upstream {url}: no OpenAI models endpoint ({exc})") from exc
    cards = listed.get("data") if isinstance(listed, dict) else None
    if not cards or not all(isinstance(card, dict) for card in cards):
        raise UpstreamMismatch(f"upstream {url}: /v1/models lists no model")
    return cards


def pick_model(url: str, cards: Sequence[dict[str, Any]], model: str | None) -> dict[str, Any]:
    """The card of ``model`` (default: the first listed).

    Raises:
        UpstreamMismatch: ``model`` is not listed.
    """
    ids = [str(card.get("id")) for card in cards]
    if model is None:
        return cards[0]
    if model in ids:
        return cards[ids.index(model)]
    raise UpstreamMismatch(f"upstream {url} does not serve model {model!r} (it lists {ids})")


def compare_tokenizers(url: str, name: str, tokenizer: Any, samples: Sequence[str],
                       tokenize: Callable[[str], list[int]]) -> None:
    """Check that ``tokenize`` (the upstream's tokenizer endpoint, no special tokens added, special-token text
    parsed) splits every sample as ``tokenizer`` does.

    Raises:
        UpstreamMismatch: a sample tokenized differently (its index and the first differing position), or the
            upstream unreachable.
    """
    for index, text in enumerate(samples):
        ours = list(tokenizer.encode(text, add_special_tokens=False))
        try:
            theirs = [int(t) for t in tokenize(text)]
        except httpx.HTTPError as exc:
            raise UpstreamMismatch(f"upstream {url} cannot be reached ({type(exc).__name__})") from exc
        if theirs != ours:
            at = next((i for i, (a, b) in enumerate(zip(ours, theirs, strict=False)) if a != b),
                      min(len(ours), len(theirs)))
            raise UpstreamMismatch(
                f"tokenizer mismatch: the upstream's model {name!r} tokenizes sample text {index} ({text[:30]!r}) "
                f"differently from GUARDRAIL_TOKENIZER (first difference at token {at}: ours "
                f"{ours[at:at + 3]}, theirs {theirs[at:at + 3]}); set GUARDRAIL_TOKENIZER to the upstream "
                "model's tokenizer")
