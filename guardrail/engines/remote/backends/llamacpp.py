"""llama.cpp's server (``llama-server``) as the gateway's upstream: its native ``POST /completion`` with a
token-id ``prompt``, ``return_tokens``, ``cache_prompt`` and bans as ``logit_bias`` ``[id, false]``, and
``POST /tokenize`` for the tokenizer check (tools/server/README.md of llama.cpp; docs/engines.md).

Differences from vLLM the engine relies on:

- a ban is exact: ``[id, false]`` sets the logit to -inf (vLLM's -100 is a bias). The fail-closed check stays.
- a stream may hold ids back: no chunk is sent for a token that leaves the text inside a UTF-8 character, and
  the chunk of the token that completes it carries only that token's id. Every chunk says how many tokens
  were decoded (``tokens_predicted``), so a gap is seen; :class:`WithheldTokens` makes the engine ask again
  for the missing tokens in one non-streamed response, whose ``tokens`` has every id. Re-picks
  (``n_predict: 1``) are non-streamed for the same reason.
- no ``min_tokens``: the end ids are banned (``[id, false]``) while fewer tokens are kept, which is what
  vLLM's ``min_tokens`` does.
- no ``stop_token_ids``: the gateway's session ends the answer on them and closes the stream.
- repetition penalties look back over the last ``repeat_last_n`` tokens; the prompt's and the request's token
  count is sent (the whole context: ``-1`` is refused), so prompt and answer count as on vLLM.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import httpx

from guardrail.engines.remote.backends.base import Piece, Submission, WithheldTokens
from guardrail.engines.remote.client import UpstreamClient, UpstreamError
from guardrail.engines.remote.upstream import UpstreamInfo, UpstreamMismatch, compare_tokenizers
from guardrail.params import GREEDY_TEMPERATURE

__all__ = ["COMPLETION_PATH", "LlamaCppAPI"]

COMPLETION_PATH = "/completion"
#: llama.cpp's ``stop_type`` -> the finish reason the engine reads (``word``: a stop string, never sent).
_FINISH = {"eos": "stop", "word": "stop", "limit": "length"}


class LlamaCppAPI:
    """llama.cpp's ``llama-server`` (its own ``/completion`` endpoint, not the OpenAI-compatible one, which
    returns no token ids)."""

    name = "llamacpp"
    unsupported: tuple[str, ...] = ("bad_words_ids", "begin_suppress_tokens", "suppress_tokens", "watermark",
                                    "response_format", "logprobs")
    #: Its ``logit_bias`` holds for the whole request: a re-pick is a ``max_tokens: 1`` request of its own.
    repick_in_request: bool = False

    def check(self, client: UpstreamClient, tokenizer: Any, card: dict[str, Any],
              samples: Sequence[str]) -> UpstreamInfo:
        """``/tokenize`` agrees with ``tokenizer`` on ``samples``; a one-token completion of a token-id prompt
        returns its id, and the same completion with that id banned (``[id, false]``) returns another; the
        card's ``meta.n_ctx`` (a slot's context) is the context.

        Raises:
            UpstreamMismatch: no ``/tokenize``, a sample tokenized differently, a completion that does not take
                token ids, does not return them, or decodes a banned id.
        """
        url, name = client.base_url, str(card["id"])

        def tokenize(text: str) -> list[int]:
            try:
                answer = client.post_json("/tokenize", {"content": text, "add_special": False, "parse_special": True})
            except UpstreamError as exc:
                raise UpstreamMismatch(f"upstream {url}: no /tokenize endpoint to compare tokenizers with "
                                       f"({exc}); llama.cpp's server has one") from exc
            return list(answer.get("tokens", []))

        compare_tokenizers(url, name, tokenizer, samples, tokenize)
        probe = list(tokenizer.encode(samples[0], add_special_tokens=False))
        first = self._probe(client, {"prompt": probe})
        banned = self._probe(client, {"prompt": probe, "logit_bias": [[first, False]]})
        if banned == first:
            raise UpstreamMismatch(f"upstream {url}: /completion decoded token {first} although logit_bias "
                                   "banned it ([id, false]); the gateway's bans would not hold")
        n_ctx = (card.get("meta") or {}).get("n_ctx")
        return UpstreamInfo(name, int(n_ctx) if n_ctx else None, self.name)

    def _probe(self, client: UpstreamClient, body: dict[str, Any]) -> int:
        url = client.base_url
        request = {**body, "n_predict": 1, "temperature": 0.0, "return_tokens": True, "cache_prompt": True,
                   "stream": False}
        try:
            answer = client.post_json(COMPLETION_PATH, request)
        except (UpstreamError, httpx.HTTPError) as exc:
            raise UpstreamMismatch(f"upstream {url}: {COMPLETION_PATH} refused a prompt of token ids ({exc})") from exc
        tokens = answer.get("tokens") if isinstance(answer, dict) else None
        if not tokens:
            raise UpstreamMismatch(f"upstream {url}: {COMPLETION_PATH} does not return token ids (return_tokens); "
                                   "the gateway must see every token the upstream decodes")
        return int(tokens[0])

    def body(self, submission: Submission) -> dict[str, Any]:
        params = submission.params
        banned = set(submission.banned_anywhere)
        if submission.position < params.min_tokens:
            banned |= submission.end_ids  # min_tokens, as vLLM implements it: the end ids masked
        # A client's bias never lifts a ban: its entries for banned ids are dropped.
        bias: list[list[Any]] = [[int(k), float(v)] for k, v in params.logit_bias.items() if int(k) not in banned]
        bias += [[t, False] for t in sorted(banned)]
        greedy = params.temperature < GREEDY_TEMPERATURE
        body: dict[str, Any] = {
            "prompt": submission.prompt,
            "n_predict": submission.max_tokens,
            "temperature": 0.0 if greedy else params.temperature,
            "top_p": params.top_p,
            "top_k": params.top_k,  # 0: off, as here
            "min_p": params.min_p,
            "typical_p": 1.0,
            "repeat_penalty": params.repetition_penalty,
            # The whole context, prompt included, as vLLM (this server refuses -1).
            "repeat_last_n": len(submission.prompt) + submission.max_tokens,
            "presence_penalty": params.presence_penalty,
            "frequency_penalty": params.frequency_penalty,
            "ignore_eos": params.ignore_eos,
            "logit_bias": bias,
            "cache_prompt": True,  # the resubmitted prefix is served from the slot's KV cache
            "return_tokens": True,
            "stream": not submission.whole,
        }
        if params.seed is not None:
            # llama.cpp's seed is a uint32; each request draws afresh (a repeated seed re-draws the rejected token).
            body["seed"] = (params.seed + submission.submissions) % 2**32
        return body

    @contextmanager
    def stream(self, client: UpstreamClient, body: dict[str, Any]) -> Iterator[Iterator[Piece]]:
        if not body.get("stream"):
            yield iter([_whole(client.post_json(COMPLETION_PATH, body))])
            return
        with client.stream_sse(COMPLETION_PATH, body, until_done=False) as chunks:
            yield _pieces(chunks)


def _whole(answer: Any) -> Piece:
    """A non-streamed answer: every id decoded is in ``tokens``."""
    if not isinstance(answer, dict) or not isinstance(answer.get("tokens"), list):
        raise UpstreamError(f"upstream {COMPLETION_PATH} answered without tokens (return_tokens)")
    tokens = [int(t) for t in answer["tokens"]]
    if int(answer.get("tokens_predicted", len(tokens))) != len(tokens):
        raise UpstreamError(f"upstream {COMPLETION_PATH} decoded {answer.get('tokens_predicted')} tokens but "
                            f"returned {len(tokens)} ids")
    return Piece(tokens, _FINISH.get(str(answer.get("stop_type")), "length"), len(tokens),
                 int((answer.get("timings") or {}).get("cache_n") or 0))


def _pieces(chunks: Iterator[dict[str, Any]]) -> Iterator[Piece]:
    """The stream's chunks as pieces; :class:`WithheldTokens` where ``tokens_predicted`` runs ahead of the ids
    received (that chunk's own ids are not yielded: they come after the missing ones)."""
    received = 0
    for chunk in chunks:
        tokens = [int(t) for t in chunk.get("tokens") or ()]
        decoded = int(chunk.get("tokens_predicted", received + len(tokens)))
        if decoded > received + len(tokens):
            raise WithheldTokens(decoded - received - len(tokens))
        received += len(tokens)
        if chunk.get("stop"):
            yield Piece(tokens, _FINISH.get(str(chunk.get("stop_type")), "length"), len(tokens),
                        int((chunk.get("timings") or {}).get("cache_n") or 0))
            return
        yield Piece(tokens, None, len(tokens))
    raise httpx.RemoteProtocolError(f"the upstream {COMPLETION_PATH} stream ended without its stop chunk")
