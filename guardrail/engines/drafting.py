"""Drafting for guarded speculative decoding: propose the next tokens, let the target model verify them.

A step of speculative decoding feeds the token the engine just kept *and* up to ``k`` drafted tokens in one
forward pass; the logits of every fed position come back, and the decode loop picks each next token from
them as it would without drafts (processors, the guard's bans, warpers, the seeded draw). While the pick
equals the draft, the draft's column is already in the KV cache and its logits are known: no pass is
spent. At the first pick that differs (or a rollback), the cache is cut back to what was kept. So the
output is the target model's, token for token for greedy decoding and draw for draw for seeded sampling,
and every token goes through ``GuardSession.accept`` in order (docs/design.md §7.2).

Acceptance rule for sampling: the drafter here proposes one token per position (a point mass ``q``), for
which the standard speculative-sampling rule (Leviathan et al. 2023, arXiv:2211.17192; Chen et al. 2023,
arXiv:2302.01318) — accept ``d`` with probability ``min(1, p(d) / q(d)) = p(d)``, else draw from
``norm(max(0, p - q))`` — is the same as: draw ``x ~ p``, accept iff ``x == d`` (P(accept) = p(d), and a
rejected draw is ``p`` without ``d``, renormalised). The decode loop does exactly that draw, so the output
distribution is the target model's, and a fixed seed gives the same draws with or without drafts.

Drafters: :class:`PromptLookup` (n-gram match over the prompt and the kept tokens; Saxena 2023, "Prompt
Lookup Decoding", the method of transformers' ``prompt_lookup_num_tokens`` and vLLM's ``ngram``
speculation). :class:`Drafter` is the interface a small draft model or Medusa-style heads (Cai et al. 2024,
arXiv:2401.10774) would implement.

How many drafts to verify (:func:`draft_width`): on a CPU a pass over ``1 + k`` tokens costs more than
over one (``VerifyCost``), so a draft pays only when enough of it is accepted. The loop tracks an
exponential moving average of the acceptance rate per request and feeds the width that maximises expected
tokens per unit of cost; a request whose drafts keep failing stops drafting (width 0) and probes again now
and then, so text it cannot predict is not slowed down.
"""

from __future__ import annotations

import collections
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

#: Drafted tokens per step at most, by default (the service's ``GUARDRAIL_SPECULATIVE_TOKENS``).
DEFAULT_SPECULATIVE_TOKENS = 4
#: n-gram sizes the prompt lookup tries, longest first (a longer match predicts better; 2 still finds
#: rewrites of short phrases).
DEFAULT_NGRAM_MAX, DEFAULT_NGRAM_MIN = 4, 2
#: Weight of the newest step in the acceptance-rate average, and the rate a request starts with.
ACCEPTANCE_SMOOTHING = 0.2
INITIAL_ACCEPTANCE = 0.6
#: Drift of the average back up per step while a request does not draft: it probes again after ~10 steps.
ACCEPTANCE_RECOVERY = 0.05


class Drafter(Protocol):
    """Proposes tokens to verify. One instance per request (it may index that request's tokens)."""

    def extend(self, token_ids: Sequence[int]) -> None:
        """Tokens appended to the sequence (the prompt first, then every kept token)."""

    def rollback_to(self, length: int) -> None:
        """The sequence was cut back to its first ``length`` tokens."""

    def propose(self, k: int) -> list[int]:
        """Up to ``k`` tokens likely to follow the sequence (may be empty)."""


class PromptLookup:
    """Prompt-lookup drafting: find the last ``n`` tokens earlier in the sequence; propose what followed.

    The index maps each n-gram (for every ``n`` in ``[ngram_min, ngram_max]``) to the positions right after
    its occurrences, updated as tokens are kept and undone on rollback, so a proposal costs a few dict
    lookups rather than a scan of the sequence.

    Args:
        ngram_max, ngram_min: n-gram sizes tried, longest first (``1 <= ngram_min <= ngram_max``).

    Raises:
        ValueError: bad n-gram sizes.
    """

    def __init__(self, ngram_max: int = DEFAULT_NGRAM_MAX, ngram_min: int = DEFAULT_NGRAM_MIN):
        if not 1 <= ngram_min <= ngram_max:
            raise ValueError(f"need 1 <= ngram_min <= ngram_max, got {ngram_min}, {ngram_max}")
        self.ngram_max, self.ngram_min = ngram_max, ngram_min
        self.tokens: list[int] = []
        # n-gram -> positions right after its occurrences (ascending): the most recent is last.
        self._index: dict[tuple[int, ...], list[int]] = collections.defaultdict(list)

    def extend(self, token_ids: Sequence[int]) -> None:
        for token in token_ids:
            self.tokens.append(int(token))
            end = len(self.tokens)
            for n in range(self.ngram_min, min(self.ngram_max, end) + 1):
                self._index[tuple(self.tokens[end - n:end])].append(end)

    def rollback_to(self, length: int) -> None:
        while len(self.tokens) > length:
            end = len(self.tokens)
            for n in range(self.ngram_min, min(self.ngram_max, end) + 1):
                key = tuple(self.tokens[end - n:end])
                positions = self._index[key]
                positions.pop()
                if not positions:
                    del self._index[key]
            self.tokens.pop()

    def propose(self, k: int) -> list[int]:
        end = len(self.tokens)
        if k <= 0:
            return []
        for n in range(min(self.ngram_max, end - 1), self.ngram_min - 1, -1):
            positions = self._index.get(tuple(self.tokens[end - n:end]))
            if positions and len(positions) > 1:  # the last occurrence is the suffix itself
                start = positions[-2]
                return self.tokens[start:min(start + k, end)]
        return []


@dataclass(frozen=True)
class VerifyCost:
    """The cost of a verification pass relative to a plain decode step (one token per row).

    A forward pass over ``n`` token columns in all costs ``~ 1 + token_share * n`` (the weights are read
    once, then every column adds its arithmetic); feeding ``k`` drafts per row over ``rows`` rows costs
    ``first_extra`` more (every position's logits, the attention mask). So a pass with drafts costs
    ``(1 + first_extra + token_share * rows * (1 + k)) / (1 + token_share * rows)`` plain steps.
    Fitted to SmolLM2 float32 on 2 CPU cores (``bench/speculative.py``, ``verify_cost``: a pass over 1 / 8
    rows of 1, 2, 3 and 5 tokens each took 65 / 74 / 69 / 88 ms and 117 / 129 / 154 / 178 ms): the first
    extra column costs most (matrix-vector kernels turn into matrix-matrix ones), further ones ~1.5 %.

    Measured again in 3 later runs on the same machine: 1 row 55-62 / 94-96 / 112-122 / 74-80 ms — MKL's
    linear layers are slower over 2 or 3 columns than over 4 or 5, which this smooth curve does not model.
    A per-shape table of measured pass times in place of the curve was tried: no gain at batch 1 (-1.5 % /
    +2.6 % tokens/s on open / repetitive prompts, noise) and 15 % fewer tokens/s at batch 8 (few samples per
    (rows, width) and no re-exploration of a width once measured slow), so the curve stays.
    """

    token_share: float = 0.015
    first_extra: float = 0.25

    def of(self, k: int, rows: int = 1) -> float:
        """Cost of a pass feeding ``k`` drafts to each of ``rows`` rows, in plain steps of that batch."""
        if k <= 0:
            return 1.0
        return (1 + self.first_extra + self.token_share * rows * (1 + k)) / (1 + self.token_share * rows)


def draft_width(acceptance: float, available: int, limit: int, cost: VerifyCost = VerifyCost()) -> int:
    """How many of ``available`` drafted tokens to verify (<= ``limit``), given the acceptance rate.

    Expected tokens kept by a pass with ``k`` drafts (:func:`expected_tokens`); the width maximising that
    over :meth:`VerifyCost.of` is chosen (0 when no width beats a plain step).

    Args:
        acceptance: the request's acceptance-rate average, in ``[0, 1]``.
        available: tokens the drafter proposed.
        limit: drafted tokens per step at most (``GUARDRAIL_SPECULATIVE_TOKENS``).
    """
    best, best_rate = 0, 1.0
    for k in range(1, min(available, limit) + 1):
        rate = expected_tokens(acceptance, k) / cost.of(k)
        if rate > best_rate:
            best, best_rate = k, rate
    return best


def expected_tokens(acceptance: float, k: int) -> float:
    """Tokens a pass feeding ``k`` drafts keeps on average, each draft accepted with probability
    ``acceptance`` until the first rejection: ``1 + a + a^2 + ... + a^k``."""
    return sum(acceptance ** i for i in range(k + 1))


@dataclass(frozen=True)
class SpeculativeConfig:
    """Speculative decoding of one engine.

    Attributes:
        num_tokens: drafted tokens per step at most (0 turns speculation off).
        ngram_max, ngram_min: the prompt lookup's n-gram sizes.
        cost: the verification cost model (:func:`draft_width`).
    """

    num_tokens: int = DEFAULT_SPECULATIVE_TOKENS
    ngram_max: int = DEFAULT_NGRAM_MAX
    ngram_min: int = DEFAULT_NGRAM_MIN
    cost: VerifyCost = VerifyCost()

    def __post_init__(self) -> None:
        if self.num_tokens < 0:
            raise ValueError(f"num_tokens must be >= 0, got {self.num_tokens}")
        if not 1 <= self.ngram_min <= self.ngram_max:
            raise ValueError(f"need 1 <= ngram_min <= ngram_max, got {self.ngram_min}, {self.ngram_max}")

    def drafter(self) -> Drafter:
        return PromptLookup(self.ngram_max, self.ngram_min)
