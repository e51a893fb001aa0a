"""vLLM's OpenAI server as the gateway's upstream: ``POST /v1/completions`` with a token-id ``prompt`` and
``return_token_ids`` (the name in vLLM 0.32's ``CompletionRequest``), ``/tokenize`` for the tokenizer check
(docs/engines.md).

Bans go one of two ways, chosen at start-up (``GUARDRAIL_UPSTREAM_LOGITS_PROCESSOR``):

* ``logit_bias`` -100 (any vLLM server): a bias for the whole request, so a rollback's re-pick is a request of
  its own (``max_tokens: 1``) followed by a continuation.
* guardrail's vLLM logits processor, when the upstream's environment has guardrail installed (vLLM loads its
  ``vllm.logits_processors`` entry point into every engine; docs/vllm.md): ``vllm_xargs`` carries exact masks,
  the always-banned ids at every position and the re-pick's bans at the request's first position only, so a rollback
  costs one request that re-picks and decodes on.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import httpx

from guardrail.engines.remote.backends.base import Piece, Submission
from guardrail.engines.remote.client import UpstreamClient, UpstreamError
from guardrail.engines.remote.upstream import UpstreamInfo, UpstreamMismatch, compare_tokenizers
from guardrail.params import GREEDY_TEMPERATURE

__all__ = ["BAN_BIAS", "LOGITS_PROCESSOR_MODES", "VLLMAPI"]

#: The ``logit_bias`` of a banned id: vLLM clamps biases to [-100, 100]; -100 leaves a probability of about
#: e^-100 relative to the top token, never picked greedily (and caught if picked: fail closed).
BAN_BIAS = -100.0
#: ``GUARDRAIL_UPSTREAM_LOGITS_PROCESSOR`` values: ``auto`` (use guardrail's logits processor when the start-up
#: probe finds it), ``on`` (refuse to start without it), ``off`` (``logit_bias`` only).
LOGITS_PROCESSOR_MODES = ("auto", "on", "off")
#: The ``vllm_xargs`` key guardrail's vLLM logits processor reads (``EXTRA_ARGS_KEY`` in
#: guardrail/engines/vllm/logits_processor.py, which this engine family does not import: vLLM and torch).
XARGS_KEY = "guardrail"


class VLLMAPI:
    """vLLM's OpenAI-compatible server (``vllm.entrypoints.openai.api_server``).

    Args:
        logits_processor: one of :data:`LOGITS_PROCESSOR_MODES`; :meth:`check` sets
            :attr:`repick_in_request` from it and the probe.

    Raises:
        ValueError: another ``logits_processor`` value.
    """

    name = "vllm"
    #: SamplingParams fields the gateway does not implement on it (the embedded engine does).
    unsupported: tuple[str, ...] = ("bad_words_ids", "begin_suppress_tokens", "suppress_tokens", "watermark",
                                    "response_format", "logprobs")

    def __init__(self, logits_processor: str = "auto") -> None:
        if logits_processor not in LOGITS_PROCESSOR_MODES:
            raise ValueError(f"upstream logits processor must be one of {LOGITS_PROCESSOR_MODES}, "
                             f"got {logits_processor!r}")
        self.logits_processor = logits_processor
        self.repick_in_request = False

    def check(self, client: UpstreamClient, tokenizer: Any, card: dict[str, Any],
              samples: Sequence[str]) -> UpstreamInfo:
        """``/tokenize`` agrees with ``tokenizer`` on ``samples``; a one-token completion of a token-id prompt
        returns token ids; the card's ``max_model_len`` is the context. Unless ``logits_processor`` is ``off``,
        the same completion with its token banned through ``vllm_xargs`` tells whether guardrail's logits
        processor runs there (:attr:`repick_in_request`).

        Raises:
            UpstreamMismatch: no ``/tokenize``, a sample tokenized differently, completions that do not take
                token ids or return them; ``logits_processor="on"`` and the processor does not answer.
        """
        url, name = client.base_url, str(card["id"])

        def tokenize(text: str) -> list[int]:
            try:
                answer = client.post_json("/tokenize", {"model": name, "prompt": text, "add_special_tokens": False})
            except UpstreamError as exc:
                raise UpstreamMismatch(f"upstream {url}: no /tokenize endpoint to compare tokenizers with ({exc}); "
                                       "vLLM's OpenAI server has one") from exc
            return list(answer.get("tokens", []))

        compare_tokenizers(url, name, tokenizer, samples, tokenize)
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
        if self.logits_processor != "off":
            self.repick_in_request = self._processor_bans(client, {**body, "prompt": probe}, returned[0])
            if self.logits_processor == "on" and not self.repick_in_request:
                raise UpstreamMismatch(
                    f"upstream {url}: guardrail's vLLM logits processor does not run there (a token banned through "
                    "vllm_xargs came back); install guardrail in the vLLM server's environment (docs/vllm.md), or "
                    "set GUARDRAIL_UPSTREAM_LOGITS_PROCESSOR=auto or off to ban through logit_bias")
        max_model_len = card.get("max_model_len")
        return UpstreamInfo(name, int(max_model_len) if max_model_len else None, self.name,
                            logits_processor=self.repick_in_request)

    @staticmethod
    def _processor_bans(client: UpstreamClient, body: dict[str, Any], first: int) -> bool:
        """Whether banning ``first`` (the greedy one-token answer to ``body``) at the request's first position
        through ``vllm_xargs`` makes the upstream answer another token: guardrail's logits processor runs there
        and reads the bans. A server that refuses the field (400), or ignores it, has no such processor."""
        xargs = {XARGS_KEY: json.dumps({"mask": "bans", "bans": {"0": [first]}})}
        try:
            answer = client.post_json("/v1/completions", {**body, "stream": False, "vllm_xargs": xargs})
        except (UpstreamError, httpx.HTTPError):
            return False
        ids = [t for choice in answer.get("choices") or () for t in choice.get("token_ids") or ()]
        return bool(ids) and ids[0] != first

    def body(self, submission: Submission) -> dict[str, Any]:
        params = submission.params
        bias = {str(k): float(v) for k, v in params.logit_bias.items()}
        if not submission.in_request:
            bias.update({str(t): BAN_BIAS for t in submission.banned_anywhere})  # a client's bias never lifts a ban
        greedy = params.temperature < GREEDY_TEMPERATURE
        body: dict[str, Any] = {
            "model": submission.model,
            "prompt": submission.prompt,
            "max_tokens": submission.max_tokens,
            "temperature": 0.0 if greedy else params.temperature,
            "top_p": params.top_p,
            "top_k": params.top_k if params.top_k > 0 else -1,
            "min_p": params.min_p,
            "repetition_penalty": params.repetition_penalty,
            "presence_penalty": params.presence_penalty,
            "frequency_penalty": params.frequency_penalty,
            # A continuation's output starts at `position`: min_tokens counts what is still owed.
            "min_tokens": max(0, params.min_tokens - submission.position),
            "ignore_eos": params.ignore_eos,
            "stop_token_ids": sorted(submission.end_ids),
            "return_token_ids": True,
            "stream_options": {"include_usage": True},
        }
        if bias:
            body["logit_bias"] = bias
        if submission.in_request:
            # Exact masks: the always-banned ids at every position, the re-pick's bans at this request's first. A
            # client's bias cannot lift them: the processor sets -inf, which no finite bias moves.
            guard: dict[str, Any] = {"mask": "bans", "always_banned": sorted(submission.always_banned)}
            if submission.position_bans:
                guard["bans"] = {"0": sorted(submission.position_bans)}
            body["vllm_xargs"] = {XARGS_KEY: json.dumps(guard, separators=(",", ":"))}
        if params.seed is not None:
            # Each request draws afresh: a repeated seed would re-draw the token the rollback rejected.
            body["seed"] = (params.seed + submission.submissions) % 2**63
        return body

    @contextmanager
    def stream(self, client: UpstreamClient, body: dict[str, Any]) -> Iterator[Iterator[Piece]]:
        with client.stream_completion(body) as chunks:
            yield _pieces(chunks)


def _pieces(chunks: Iterator[dict[str, Any]]) -> Iterator[Piece]:
    for chunk in chunks:
        usage = chunk.get("usage") or {}
        cached = int((usage.get("prompt_tokens_details") or {}).get("cached_tokens") or 0)
        choices = chunk.get("choices") or ()
        if not choices:
            yield Piece((), None, 0, cached)  # the usage chunk: no decode step
            continue
        for index, choice in enumerate(choices):
            ids = choice.get("token_ids")
            if ids is None:
                raise UpstreamError("upstream stream chunk without token_ids (return_token_ids)")
            first = index == 0  # one decode step per chunk (the usage chunk: none)
            yield Piece([int(t) for t in ids], choice.get("finish_reason"), int(first), cached if first else 0)
