"""The streaming rollback decoder: the model never emits a banned term, and the guard costs microseconds.

One step (docs/design.md, "The decode step")::

    logits of position p (kept from the forward pass that produced them)
      -> processors (logit_bias, repetition penalty, bad words, suppress)       sampling.build_processors
      -> always-banned ids and the bans of position p                          -inf, in place
      -> warpers (temperature, top-k, top-p, min-p), then the watermark        sampling.build_warpers
      -> pick (argmax or seeded draw)                                          sampling.TokenPicker
      -> TokenMatcher.push(token): every pick, including the re-pick after a rollback
           hit -> roll back to where the term began (crop the KV cache, drop later bans), ban the term's
                  first token there (plus the matcher's retry bans) and pick again from the kept logits
           ok  -> keep the token, release what no future match or stop string can still claim,
                  one forward pass for the logits of p + 1

Rollback costs no forward pass: the raw logits of every position a rollback can still reach (those not yet
released) are kept, and the processors only read the prefix, which a rollback to ``p`` leaves as it was.
The KV cache is cropped (:mod:`guardrail.engines.transformers.kv_cache`), or rebuilt when a sliding-window
layer cannot crop.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import replace

import torch

from guardrail.engines.transformers.kv_cache import KVCache
from guardrail.engines.transformers.sampling import SamplingParams, TokenPicker, build_processors, build_warpers
from guardrail.guard.bans import PositionBans
from guardrail.guard.events import Event, Finish, FinishReason, Rollback, TextDelta, Usage
from guardrail.guard.holdback import TextBuffer
from guardrail.matching.artefact import Artefact
from guardrail.matching.token_matcher import Hit, TokenMatcher
from guardrail.matching.vocab import TokenVocab

_NEG_INF = -math.inf
#: ``Hit.term_id`` of a stop-string cut whose text could not be checked (see ``_Generation._probe_cut``).
UNCHECKED_CUT = -1


def generation_eos_ids(model) -> set[int]:
    """EOS ids named by ``model.generation_config`` (an int or a list), as a set."""
    config = getattr(model, "generation_config", None)
    eos = getattr(config, "eos_token_id", None) if config is not None else None
    if eos is None:
        return set()
    return {int(eos)} if isinstance(eos, int) else {int(e) for e in eos}


class StreamingDecoder:
    """Decode with a banned-term guard; one per process (holds the model, no per-request state).

    Args:
        model: a transformers causal LM in eval mode.
        tokenizer: its tokenizer (kept for callers; the decoder itself reads ``vocab``).
        vocab: the exact bytes of every token id (``TokenVocab.from_tokenizer``).
        retry_bans: after a rollback, also ban the tokens that would begin the same term at least as deep
            (:meth:`TokenMatcher.retry_bans`); ``False`` bans only the term's first token (benchmark ablation).
        record_past: let sliding-window caches crop past their window
            (see :mod:`guardrail.engines.transformers.kv_cache`);
            ``False`` forces the re-prefill fallback on such models (tests and benchmarks use it).

    Example:
        >>> decoder = StreamingDecoder(model, tokenizer, vocab)
        >>> for event in decoder.stream(prompt_ids, artefact, SamplingParams(temperature=0, max_tokens=64)):
        ...     if isinstance(event, TextDelta): print(event.text, end="")
    """

    def __init__(self, model, tokenizer, vocab: TokenVocab, record_past: bool = True, retry_bans: bool = True):
        self.model = model
        self.tokenizer = tokenizer
        self.vocab = vocab
        self.record_past = record_past
        self.retry_bans = retry_bans
        self.eos_ids = frozenset(vocab.eos_ids | generation_eos_ids(model))
        self.vocab_size = model.config.get_text_config().vocab_size
        self._byte_tokens: dict[int, int] | None = None

    def byte_tokens(self) -> dict[int, int]:
        """``{byte value: id of a token holding exactly that byte}`` (both supported tokenizer families have
        all 256: byte-level BPE's alphabet, SentencePiece's ``<0xNN>``); built on first use."""
        if self._byte_tokens is None:
            found: dict[int, int] = {}
            for token_id, data in enumerate(self.vocab.token_bytes):
                if len(data) == 1 and token_id not in self.vocab.special_ids:
                    found.setdefault(data[0], token_id)
            self._byte_tokens = found
        return self._byte_tokens

    def stream(self, prompt_ids: Sequence[int], artefact: Artefact | None, params: SamplingParams,
               cancel: threading.Event | None = None) -> Iterator[Event]:
        """Generate after ``prompt_ids``, yielding :class:`TextDelta` and :class:`Rollback` events and, last,
        one :class:`Finish`.

        Args:
            prompt_ids: the prompt's token ids (:mod:`guardrail.prompts`), not empty.
            artefact: the compiled word lists for this vocab; ``None`` decodes unguarded (same loop, no
                matcher, no masks: the benchmark's baseline).
            params: sampling, stop conditions and rollback budget.
            cancel: when set, the generation ends at the next step with ``Finish(reason="cancelled")``.

        Raises:
            ValueError: empty prompt, a token id outside the vocab in ``prompt_ids`` or ``params``, or an
                artefact compiled for another vocab (raised by this call, before any model work).
        """
        return _Generation(self, prompt_ids, artefact, params, cancel).run()


class _Generation:
    """The state of one request: cache, kept tokens, bans, matcher, text, counters."""

    def __init__(self, decoder: StreamingDecoder, prompt_ids: Sequence[int], artefact: Artefact | None,
                 params: SamplingParams, cancel: threading.Event | None):
        self.decoder = decoder
        self.prompt = [int(t) for t in prompt_ids]
        self.artefact = artefact
        self.params = params
        self.cancel = cancel
        self._setup()

    # -- setup -------------------------------------------------------------------------------------------
    def _setup(self) -> None:
        decoder, params = self.decoder, self.params
        if not self.prompt:
            raise ValueError("prompt_ids must not be empty")
        size = len(decoder.vocab)
        bad = [t for t in self.prompt if not 0 <= t < size]
        if bad:
            raise ValueError(f"prompt_ids: token ids must be in [0, {size}), got {bad[:10]}")
        params.check_vocab(size)
        if self.artefact is not None and self.artefact.vocab.fingerprint != decoder.vocab.fingerprint:
            raise ValueError("artefact was compiled for another tokenizer (vocab fingerprint differs)")
        self.matcher = TokenMatcher(self.artefact) if self.artefact is not None else None
        # Built once per request: the ids whose own text completes a term, masked at every step.
        always = self.artefact.always_banned if self.artefact is not None else ()
        self.always_banned = torch.from_numpy(always) if len(always) else None
        self.bans = PositionBans()
        self.processors = build_processors(params, len(self.prompt), decoder.eos_ids)
        self.warpers = build_warpers(params, decoder.vocab_size)
        self.picker = TokenPicker(params)
        self.kv = KVCache(decoder.model, decoder.record_past)
        self.text = TextBuffer(decoder.vocab.token_bytes, params.stop)
        self.ids = list(self.prompt)  # prompt + kept completion tokens
        self.input_ids = None
        if self.processors or self.warpers:
            # Processors read the prefix as (1, seq_len) int64: one buffer, written once per kept token.
            self.input_ids = torch.zeros((1, len(self.prompt) + params.max_tokens + 1), dtype=torch.long)
            self.input_ids[0, :len(self.prompt)] = torch.tensor(self.prompt)
        self.logits: dict[int, torch.Tensor] = {}  # completion position -> raw logits (1, vocab)
        self.rollbacks = 0
        self.rollbacks_at: dict[int, int] = {}
        # reach[k]: matcher.releasable() after the first k completion tokens (see _release_limit).
        self.reach = [0]
        self.frontier = 0  # rollbacks never go before this position (see _release_limit)

    @property
    def pos(self) -> int:
        """Completion tokens kept."""
        return len(self.ids) - len(self.prompt)

    # -- the loop ----------------------------------------------------------------------------------------
    def run(self) -> Iterator[Event]:
        self.started = time.perf_counter()
        self.logits[0] = self.kv.forward(self.prompt)
        padding = self.logits[0].shape[-1] - len(self.decoder.vocab)
        if padding > 0:  # logits rows past the tokenizer's vocab (padded embeddings) carry no text
            extra = torch.arange(len(self.decoder.vocab), self.logits[0].shape[-1])
            self.always_banned = extra if self.always_banned is None else torch.cat([self.always_banned, extra])
        params = self.params
        while True:
            if self.cancel is not None and self.cancel.is_set():
                yield from self._end("cancelled", self.pos)
                return
            if time.perf_counter() - self.started > params.timeout_s:
                yield from self._end("length", self.pos)
                return
            if self.pos >= params.max_tokens:
                outcome = yield from self._end_of_text()
                if outcome:
                    yield from self._end("length", self.pos)
                    return
                if outcome is None:
                    return
                continue
            token = self._pick()
            if token is None:  # every candidate is banned here
                yield from self._end("content_filter", self.pos)
                return
            if token in self.decoder.eos_ids:
                outcome = yield from self._end_of_text()
                if outcome:
                    yield from self._end("stop", self.pos)
                    return
                if outcome is None:
                    return
                continue
            hit = self.matcher.push(token) if self.matcher is not None else None
            if hit is not None:
                if not (yield from self._roll_back(hit)):
                    return
                continue
            self._keep(token)
            stop_at = self.text.find_stop(self.pos - 1)
            if stop_at is not None:
                hit = self._probe_cut(stop_at)[1] if self.matcher is not None else None
                if hit is None:
                    yield from self._end("stop", cut_bytes=stop_at)
                    return
                if not (yield from self._roll_back(hit)):
                    return
                continue
            delta = self.text.release(self._release_limit())
            if delta:
                yield TextDelta(delta)
            self._forget_logits()
            if self.pos < params.max_tokens:
                self.logits[self.pos] = self.kv.forward([token])

    @torch.inference_mode()
    def _pick(self) -> int | None:
        return self.picker.pick(self._scores())

    @torch.inference_mode()  # the kept logits are inference tensors: masked in place in this mode only
    def _scores(self) -> torch.Tensor:
        """Final scores ``(1, vocab)`` of the current position: processors, bans, warpers."""
        position = self.pos
        scores = self.logits[position]
        prefix = self.input_ids[:, :len(self.ids)] if self.input_ids is not None else None
        if self.processors:
            scores = self.processors(prefix, scores)
        # In place is safe even on the kept raw logits: the always-banned mask is idempotent, and the bans
        # of a position only grow while its logits are valid (a rollback to an earlier position discards
        # both). The processors above never modify their input.
        if self.always_banned is not None:
            scores.index_fill_(1, self.always_banned, _NEG_INF)
        banned = self.bans.at(position)
        if banned is not None:
            scores.index_fill_(1, banned, _NEG_INF)
        if self.warpers:
            scores = self.warpers(prefix, scores)
        return scores

    def _keep(self, token: int) -> None:
        if self.input_ids is not None:
            self.input_ids[0, len(self.ids)] = token
        self.ids.append(token)
        self.text.append(token)
        if self.matcher is not None:
            self.reach.append(self.matcher.releasable())

    def _release_limit(self) -> int:
        """Bytes no future match (nor a stop string) can claim, whatever rollbacks come.

        ``matcher.releasable()`` bounds where a match of the *current* text can start, but a rollback to
        ``k`` resumes from the state after ``k`` tokens, which may expect more (" dog" + " cat" rules out
        "dog dog"; rolled back to " dog", it does not). Rollback targets are at or after ``releasable()``,
        and from a target ``k`` the next ones are at or after ``reach[k]`` (the releasable count after ``k``
        tokens), which never decreases along the text. So everything before a *clean* position ``L``
        (``reach[L] == L``: no partial match pending) at or before ``releasable()`` is final.
        """
        if self.matcher is None:
            self.frontier = self.pos
            return min([self.text.end(self.pos), *self.text.stop_cuts()])
        limit = self.reach[-1]
        cuts = self.text.stop_cuts()
        for cut in cuts:
            # If a stop string completes the answer ends at `cut`: a word term ending right there would
            # match (and roll back) in that text.
            limit = min(limit, self._probe_cut(cut)[0])
        clean = limit
        while self.reach[clean] != clean:
            clean -= 1
        self.frontier = clean
        return min([self.text.end(clean), *cuts])

    def _forget_logits(self) -> None:
        """Drop the logits of positions no rollback can reach (before the clean frontier)."""
        for position in [p for p in self.logits if p < self.frontier]:
            del self.logits[position]

    # -- rollback ----------------------------------------------------------------------------------------
    def _roll_back(self, hit: Hit) -> Iterator[Event]:
        """Go back to ``hit.start_token`` and ban the term's first token there.

        Yields the :class:`Rollback` event, or the final events when the budget is spent. Returns True
        when decoding goes on.
        """
        params = self.params
        start = hit.start_token
        self.rollbacks += 1
        count = self.rollbacks_at[start] = self.rollbacks_at.get(start, 0) + 1
        if self.rollbacks > params.max_rollbacks or count > params.max_rollbacks_per_position:
            yield from self._end("content_filter", start)
            return False
        discarded = self.pos - start
        self.matcher.rollback_to(start)
        banned = {hit.first_token}
        if hit.term_id != UNCHECKED_CUT and self.decoder.retry_bans:
            banned |= self.matcher.retry_bans(hit)
        self.bans.rollback_to(start)
        self.bans.add(start, banned)
        for later in [p for p in self.rollbacks_at if p > start]:
            del self.rollbacks_at[later]
        if discarded:
            self._rollback_to(start)
        yield Rollback(start, hit.list_name, discarded)
        return True

    def _rollback_to(self, tokens: int) -> None:
        """Keep the first ``tokens`` completion tokens (the logits of position ``tokens`` are kept)."""
        keep = len(self.prompt) + tokens
        del self.ids[keep:]
        del self.reach[tokens + 1:]
        self.text.rollback_to(tokens)
        for position in [p for p in self.logits if p > tokens]:
            del self.logits[position]
        if self.kv.length > keep:
            self.kv.rollback_to(keep, self.ids)
        if tokens not in self.logits:  # not expected (see _forget_logits); recompute rather than fail
            self.logits[tokens] = self.kv.reprefill(self.ids)

    # -- ends of text ------------------------------------------------------------------------------------
    def _end_of_text(self) -> Iterator[Event]:
        """The text would end here (EOS or ``max_tokens``): a pending ``word`` term at the very end matches.

        Returns True when the text may end, False after a rollback (decode on), None when the stream
        already finished (budget spent).
        """
        hit = self.matcher.finish() if self.matcher is not None else None
        if hit is None:
            return True
        return False if (yield from self._roll_back(hit)) else None

    def _probe_cut(self, cut: int) -> tuple[int, Hit | None]:
        """If the answer ended at byte ``cut``: the releasable count of that text (whole tokens), and the
        match at its end, if any. The matcher is left as it was.

        The bytes of the token holding ``cut`` up to it are pushed as single-byte tokens (the matcher's
        outcome depends only on the bytes); a hit that begins inside them is reported at that token, since
        only whole tokens can be rolled back. A vocab may lack a single-byte token for some bytes (SmolLM2
        has none for a few control and invalid-UTF-8 bytes): that text cannot be checked, so the token
        holding the cut is treated as a hit (rolled back) rather than emitted unchecked.
        """
        matcher, text = self.matcher, self.text
        whole = text.token_at(cut)
        tail = self.ids[len(self.prompt) + whole:]
        byte_tokens = self.decoder.byte_tokens()
        piece = bytes(text.data[text.end(whole):cut])
        matcher.rollback_to(whole)
        hit = None
        if all(b in byte_tokens for b in piece):
            for b in piece:
                hit = matcher.push(byte_tokens[b])
                if hit is not None:
                    break
            if hit is None:
                hit = matcher.finish()
        else:
            hit = Hit(UNCHECKED_CUT, "stop", "", whole, tail[0], 0, 0)
        reach = min(matcher.releasable(), whole)
        matcher.rollback_to(whole)
        for token in tail:
            matcher.push(token)
        if hit is not None and hit.start_token >= whole:
            hit = replace(hit, start_token=whole, first_token=tail[0])
        return reach, hit

    def _end(self, reason: FinishReason, cut_tokens: int | None = None,
             cut_bytes: int | None = None) -> Iterator[Event]:
        """Release the answer up to the cut and finish.

        A token cut is moved back past any match the shorter text would end with (text cut before the
        term); a byte cut (stop string) was checked by :meth:`_probe_cut`.
        """
        if cut_bytes is None:
            if self.matcher is not None:
                self.matcher.rollback_to(cut_tokens)
                while (hit := self.matcher.finish()) is not None:
                    cut_tokens = hit.start_token
                    self.matcher.rollback_to(cut_tokens)
            del self.ids[len(self.prompt) + cut_tokens:]
            del self.reach[cut_tokens + 1:]
            self.text.rollback_to(cut_tokens)  # raises rather than retract released text
            cut_bytes = self.text.end(cut_tokens)
        delta = self.text.release(cut_bytes, final=True)
        if delta:
            yield TextDelta(delta)
        yield Finish(reason, self.text.text, Usage(
            prompt_tokens=len(self.prompt),
            completion_tokens=self.pos,
            rollbacks=self.rollbacks,
            forward_passes=self.kv.forward_passes,
            reprefills=self.kv.reprefills,
            seconds=time.perf_counter() - self.started,
        ), tuple(self.ids[len(self.prompt):]))
