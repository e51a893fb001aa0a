"""The start-up check of an upstream: reachable, serving a model, the same tokenizer, token ids in and out.

A gateway that guarded another vocab than the upstream decodes would match the wrong bytes: every check
here fails with :class:`UpstreamMismatch`, naming what differs, and the service refuses to start.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import httpx

from guardrail.engines.remote.client import UpstreamClient, UpstreamError

__all__ = ["SAMPLE_TEXTS", "UpstreamInfo", "UpstreamMismatch", "check_upstream"]

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
    """

    model: str
    max_model_len: int | None


def check_upstream(client: UpstreamClient, tokenizer: Any, model: str | None = None,
                   samples: Sequence[str] = SAMPLE_TEXTS) -> UpstreamInfo:
    """Check ``client``'s upstream against ``tokenizer`` (a transformers tokenizer).

    Args:
        model: the upstream model id to use (default: the only one ``/v1/models`` lists, else its first).

    Raises:
        UpstreamMismatch: unreachable; no model, or not ``model``; no ``/tokenize``; a sample text tokenized
            differently (the text's index and the first differing position); completions that do not take
            token ids or return them (``return_token_ids``).
    """
    url = client.base_url
    try:
        listed = client.get_json("/v1/models")
    except httpx.HTTPError as exc:
        raise UpstreamMismatch(f"upstream {url} cannot be reached ({type(exc).__name__}: {exc})") from exc
    except UpstreamError as exc:
        raise UpstreamMismatch(f"upstream {url}: no OpenAI models endpoint ({exc})") from exc
    cards = listed.get("data") if isinstance(listed, dict) else None
    if not cards:
        raise UpstreamMismatch(f"upstream {url}: /v1/models lists no model")
    ids = [str(card.get("id")) for card in cards]
    if model is None:
        card = cards[0]
    elif model in ids:
        card = cards[ids.index(model)]
    else:
        raise UpstreamMismatch(f"upstream {url} does not serve model {model!r} (it lists {ids})")
    name = str(card["id"])
    max_model_len = card.get("max_model_len")

    for index, text in enumerate(samples):
        ours = list(tokenizer.encode(text, add_special_tokens=False))
        try:
            answer = client.post_json("/tokenize", {"model": name, "prompt": text, "add_special_tokens": False})
        except UpstreamError as exc:
            raise UpstreamMismatch(f"upstream {url}: no /tokenize endpoint to compare tokenizers with ({exc}); "
                                   "vLLM's OpenAI server has one") from exc
        except httpx.HTTPError as exc:
            raise UpstreamMismatch(f"upstream {url} cannot be reached ({type(exc).__name__})") from exc
        theirs = [int(t) for t in answer.get("tokens", [])]
        if theirs != ours:
            at = next((i for i, (a, b) in enumerate(zip(ours, theirs, strict=False)) if a != b),
                      min(len(ours), len(theirs)))
            raise UpstreamMismatch(
                f"tokenizer mismatch: the upstream's model {name!r} tokenizes sample text {index} ({text[:30]!r}) "
                f"differently from GUARDRAIL_TOKENIZER (first difference at token {at}: ours "
                f"{ours[at:at + 3]}, theirs {theirs[at:at + 3]}); set GUARDRAIL_TOKENIZER to the upstream "
                "model's tokenizer")

    probe = list(tokenizer.encode(samples[0], add_special_tokens=False))
    body = {"model": name, "prompt": probe, "max_tokens": 1, "temperature": 0, "return_token_ids": True}
    try:
        with client.stream_completion(body) as chunks:
            returned = [t for chunk in chunks for choice in chunk.get("choices", ())
                        for t in choice.get("token_ids") or ()]
    except (UpstreamError, httpx.HTTPError) as exc:
        raise UpstreamMismatch(f"upstream {url}: /v1/completions refused a prompt of token ids ({exc})") from exc
    if not returned:
        raise UpstreamMismatch(f"upstream {url}: /v1/completions does not return token ids (return_token_ids); "
                               "the gateway must see every token the upstream decodes")
    return UpstreamInfo(name, int(max_model_len) if max_model_len else None)
