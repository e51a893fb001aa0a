"""Sampling parameters of one request and the transformers logits processors they map to.

The decoder applies, per step and in ``generate``'s order (transformers 5.23
``GenerationMixin._get_logits_processor``):

1. processors: ``SequenceBias`` (OpenAI ``logit_bias``), ``RepetitionPenalty``, then OpenAI's
   ``presence_penalty``/``frequency_penalty`` (:class:`PresenceFrequencyPenaltyLogitsProcessor`, after
   the repetition penalty as in vLLM), ``NoBadWords`` (``bad_words_ids``), ``MinNewTokensLength``
   (``min_tokens``), ``SuppressTokens``, ``SuppressTokensAtBegin``;
2. the banned-term masks (always-banned ids and position bans — not a transformers class);
3. warpers, only when sampling: ``Temperature``, ``TopK``, ``TopP``, ``MinP``;
4. ``WatermarkLogitsProcessor`` last, as ``generate`` does (transformers PR #34630: the green-list bias must
   not be undone by later processing); it only adds to finite scores, so banned ids stay ``-inf``;
5. greedy argmax, or a draw from ``softmax`` with a seeded ``torch.Generator``.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, fields
from typing import TypeGuard, cast

import torch
from transformers import LogitsProcessorList
from transformers.generation.logits_process import (
    LogitsProcessor,
    MinNewTokensLengthLogitsProcessor,
    MinPLogitsWarper,
    NoBadWordsLogitsProcessor,
    RepetitionPenaltyLogitsProcessor,
    SequenceBiasLogitsProcessor,
    SuppressTokensAtBeginLogitsProcessor,
    SuppressTokensLogitsProcessor,
    TemperatureLogitsWarper,
    TopKLogitsWarper,
    TopPLogitsWarper,
)

from guardrail.engines.transformers.watermark import DEFAULT_HASHING_KEY, watermark_processor
from guardrail.guard.escalation import DEFAULT_EVASION_GUARD, EvasionGuard, check_evasion_guard

#: OpenAI's range for ``logit_bias`` values.
MAX_LOGIT_BIAS = 100.0
MAX_STOP_STRINGS = 16
#: OpenAI's range for ``presence_penalty`` and ``frequency_penalty``.
MAX_PENALTY = 2.0
#: Temperatures below this are greedy decoding: vLLM's ``_SAMPLING_EPS`` (vllm/sampling_params.py). Dividing
#: logits by 1e-40 overflows to inf and softmax then yields NaN.
GREEDY_TEMPERATURE = 1e-5


def _is_int(value: object) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _token_ids(name: str, values: Iterable[object]) -> tuple[int, ...]:
    ids: list[int] = []
    for value in values:
        if not _is_int(value) or value < 0:
            raise ValueError(f"{name}: token ids must be non-negative ints, got {value!r}")
        ids.append(value)
    return tuple(ids)


@dataclass(frozen=True)
class SamplingParams:
    """How to pick tokens, when to stop, and the rollback budget of one request.

    Attributes:
        max_tokens: completion tokens to keep at most (rolled-back tokens do not count).
        temperature: the softmax temperature, ``>= 0``; below :data:`GREEDY_TEMPERATURE` (``1e-5``, as in
            vLLM) the decoding is greedy.
        top_p: nucleus sampling mass in ``(0, 1]`` (1 = off).
        top_k: keep the ``k`` most likely tokens (0 = off).
        min_p: drop tokens below ``min_p`` × the top probability, in ``[0, 1]`` (0 = off).
        seed: seeds the sampling ``torch.Generator`` (``None``: a random seed).
        stop: strings that end the answer; held back like terms and never emitted.
        logit_bias: ``{token id: bias}`` added to the logits, OpenAI semantics (bias in ``[-100, 100]``).
            String keys holding digits are accepted (JSON objects have string keys).
        bad_words_ids: token-id sequences that must not be generated (``NoBadWordsLogitsProcessor``).
        suppress_tokens: token ids never generated.
        begin_suppress_tokens: token ids not generated as the first completion token.
        repetition_penalty: > 1 penalises tokens already in prompt or answer (1 = off).
        presence_penalty: in ``[-2, 2]``; subtracted once from the logit of every token already in the
            answer (OpenAI semantics; 0 = off).
        frequency_penalty: in ``[-2, 2]``; subtracted from a token's logit once per occurrence in the answer.
        min_tokens: the end ids (:meth:`end_ids`) are masked until this many completion tokens (vLLM).
        stop_token_ids: token ids that end the answer like EOS (vLLM); not part of the text.
        ignore_eos: do not end at the model's EOS ids (vLLM); ``stop_token_ids`` still end the answer.
        watermark: add the green-list watermark (:mod:`guardrail.engines.transformers.watermark`).
        watermark_key: hashing key of the watermark.
        max_rollbacks: rollbacks allowed per request before ``content_filter``.
        max_rollbacks_per_position: rollbacks to one position allowed before ``content_filter``.
        evasion_guard: ``"substring"`` (default): a term that caused a rollback is also matched as a
            substring for the rest of the generation (glued and ``_``-joined forms;
            :mod:`guardrail.guard.escalation`); ``"edit"``: also with one edit of tolerance (terms of 5+
            letters: misspelled forms); ``"off"``: every term keeps its own match mode.
        timeout_s: wall-clock limit in seconds; the answer so far ends with ``length``.
        speculative: let the engine draft tokens (prompt lookup) and verify them in one forward pass, when
            it has speculation on (:mod:`guardrail.engines.drafting`); the output is the same either way
            (greedy: token for token; seeded sampling: draw for draw), only the speed differs.

    Raises:
        ValueError: on construction, naming the field and the bad value.
    """

    max_tokens: int = 256
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0
    min_p: float = 0.0
    seed: int | None = None
    stop: tuple[str, ...] = ()
    logit_bias: Mapping[int, float] = field(default_factory=dict)
    bad_words_ids: tuple[tuple[int, ...], ...] = ()
    suppress_tokens: tuple[int, ...] = ()
    begin_suppress_tokens: tuple[int, ...] = ()
    repetition_penalty: float = 1.0
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    min_tokens: int = 0
    stop_token_ids: tuple[int, ...] = ()
    ignore_eos: bool = False
    watermark: bool = False
    watermark_key: int = DEFAULT_HASHING_KEY
    max_rollbacks: int = 64
    max_rollbacks_per_position: int = 8
    timeout_s: float = 60.0
    evasion_guard: EvasionGuard = DEFAULT_EVASION_GUARD
    speculative: bool = True

    def __post_init__(self) -> None:
        def set_(name: str, value: object) -> None:
            object.__setattr__(self, name, value)

        if not isinstance(self.speculative, bool):
            raise ValueError(f"speculative must be a bool, got {self.speculative!r}")
        if not _is_int(self.max_tokens) or self.max_tokens < 1:
            raise ValueError(f"max_tokens must be an int >= 1, got {self.max_tokens!r}")
        if not _is_number(self.temperature) or self.temperature < 0:
            raise ValueError(f"temperature must be a number >= 0, got {self.temperature!r}")
        if not _is_number(self.top_p) or not 0 < self.top_p <= 1:
            raise ValueError(f"top_p must be in (0, 1], got {self.top_p!r}")
        if not _is_int(self.top_k) or self.top_k < 0:
            raise ValueError(f"top_k must be an int >= 0, got {self.top_k!r}")
        if not _is_number(self.min_p) or not 0 <= self.min_p <= 1:
            raise ValueError(f"min_p must be in [0, 1], got {self.min_p!r}")
        if self.seed is not None and (not _is_int(self.seed) or not 0 <= self.seed < 2**63):
            raise ValueError(f"seed must be None or an int in [0, 2**63), got {self.seed!r}")
        stop = (self.stop,) if isinstance(self.stop, str) else tuple(self.stop)
        if len(stop) > MAX_STOP_STRINGS or any(not isinstance(s, str) or not s for s in stop):
            raise ValueError(f"stop must be at most {MAX_STOP_STRINGS} non-empty strings, got {self.stop!r}")
        set_("stop", stop)
        if not isinstance(self.logit_bias, Mapping):
            raise ValueError(f"logit_bias must map token ids to numbers, got {self.logit_bias!r}")
        bias: dict[int, float] = {}
        for key, value in self.logit_bias.items():
            token = int(key) if isinstance(key, str) and key.isdigit() else key
            if not _is_int(token) or token < 0:
                raise ValueError(f"logit_bias: keys must be token ids (ints >= 0), got {key!r}")
            if not _is_number(value) or not -MAX_LOGIT_BIAS <= value <= MAX_LOGIT_BIAS:
                raise ValueError(f"logit_bias[{key!r}] must be a number in [-100, 100], got {value!r}")
            bias[token] = float(value)
        set_("logit_bias", bias)
        bad = tuple(_token_ids("bad_words_ids", seq) for seq in self.bad_words_ids)
        if any(not seq for seq in bad):
            raise ValueError(f"bad_words_ids: sequences must not be empty, got {self.bad_words_ids!r}")
        set_("bad_words_ids", bad)
        set_("suppress_tokens", _token_ids("suppress_tokens", self.suppress_tokens))
        set_("begin_suppress_tokens", _token_ids("begin_suppress_tokens", self.begin_suppress_tokens))
        if not _is_number(self.repetition_penalty) or self.repetition_penalty <= 0:
            raise ValueError(f"repetition_penalty must be a number > 0, got {self.repetition_penalty!r}")
        for name in ("presence_penalty", "frequency_penalty"):
            value = getattr(self, name)
            if not _is_number(value) or not -MAX_PENALTY <= value <= MAX_PENALTY:
                raise ValueError(f"{name} must be a number in [-2, 2], got {value!r}")
        if not _is_int(self.min_tokens) or not 0 <= self.min_tokens <= self.max_tokens:
            raise ValueError(f"min_tokens must be an int in [0, max_tokens={self.max_tokens}], got {self.min_tokens!r}")
        set_("stop_token_ids", _token_ids("stop_token_ids", self.stop_token_ids))
        if not isinstance(self.ignore_eos, bool):
            raise ValueError(f"ignore_eos must be a bool, got {self.ignore_eos!r}")
        if not isinstance(self.watermark, bool):
            raise ValueError(f"watermark must be a bool, got {self.watermark!r}")
        if not _is_int(self.watermark_key) or self.watermark_key <= 0:
            raise ValueError(f"watermark_key must be an int > 0, got {self.watermark_key!r}")
        if not _is_int(self.max_rollbacks) or self.max_rollbacks < 0:
            raise ValueError(f"max_rollbacks must be an int >= 0, got {self.max_rollbacks!r}")
        if not _is_int(self.max_rollbacks_per_position) or self.max_rollbacks_per_position < 0:
            raise ValueError(f"max_rollbacks_per_position must be an int >= 0, got {self.max_rollbacks_per_position!r}")
        if not _is_number(self.timeout_s) or self.timeout_s <= 0:
            raise ValueError(f"timeout_s must be a number > 0, got {self.timeout_s!r}")
        check_evasion_guard(self.evasion_guard)

    @property
    def greedy(self) -> bool:
        """Whether tokens are picked by argmax (``temperature < GREEDY_TEMPERATURE``)."""
        return self.temperature < GREEDY_TEMPERATURE

    def end_ids(self, eos_ids: Iterable[int]) -> frozenset[int]:
        """The token ids that end this request's answer: the model's ``eos_ids`` (unless ``ignore_eos``)
        plus ``stop_token_ids``. The decoder stops on these instead of its own EOS set."""
        return frozenset(self.stop_token_ids) | (frozenset() if self.ignore_eos else frozenset(eos_ids))

    @classmethod
    def field_names(cls) -> frozenset[str]:
        """The accepted keyword names (for APIs that forward ``**params``)."""
        return frozenset(f.name for f in fields(cls))

    def check_vocab(self, vocab_size: int) -> None:
        """Check every token id against the model's vocab.

        Raises:
            ValueError: naming the field holding an id ``>= vocab_size``.
        """
        groups = {
            "logit_bias": self.logit_bias.keys(),
            "bad_words_ids": (t for seq in self.bad_words_ids for t in seq),
            "suppress_tokens": self.suppress_tokens,
            "begin_suppress_tokens": self.begin_suppress_tokens,
            "stop_token_ids": self.stop_token_ids,
        }
        for name, ids in groups.items():
            bad = sorted(t for t in ids if t >= vocab_size)
            if bad:
                raise ValueError(f"{name}: token ids must be < {vocab_size} (the vocab size), got {bad[:10]}")


def build_processors(params: SamplingParams, prompt_length: int, eos_ids: Iterable[int]) -> LogitsProcessorList:
    """The processors applied before the banned-term masks, in ``generate``'s order.

    Args:
        params: the request's parameters.
        prompt_length: tokens in the prompt (where ``begin_suppress_tokens`` applies).
        eos_ids: the model's end ids; ``NoBadWordsLogitsProcessor`` never bans them on their own, and
            ``min_tokens`` masks ``params.end_ids(eos_ids)``.

    Returns:
        A list, empty when no option is set; each call maps ``(input_ids (1, seq_len) int64, scores (1,
        vocab) float32)`` to new scores (none modifies its input in place).
    """
    out = LogitsProcessorList()
    if params.logit_bias:
        out.append(SequenceBiasLogitsProcessor([[[token], bias] for token, bias in params.logit_bias.items()]))
    if params.repetition_penalty != 1.0:
        out.append(RepetitionPenaltyLogitsProcessor(float(params.repetition_penalty)))
    if params.presence_penalty or params.frequency_penalty:
        out.append(PresenceFrequencyPenaltyLogitsProcessor(prompt_length, params.presence_penalty,
                                                           params.frequency_penalty))
    eos_ids = list(eos_ids)
    if params.bad_words_ids:
        out.append(NoBadWordsLogitsProcessor([list(seq) for seq in params.bad_words_ids], sorted(eos_ids) or None))
    end_ids = sorted(params.end_ids(eos_ids))
    if params.min_tokens and end_ids:
        out.append(MinNewTokensLengthLogitsProcessor(prompt_length, params.min_tokens, end_ids))
    if params.suppress_tokens:
        out.append(SuppressTokensLogitsProcessor(params.suppress_tokens))
    if params.begin_suppress_tokens:
        out.append(SuppressTokensAtBeginLogitsProcessor(params.begin_suppress_tokens, prompt_length))
    return out


class PresenceFrequencyPenaltyLogitsProcessor(LogitsProcessor):
    r"""OpenAI's ``presence_penalty`` and ``frequency_penalty`` over the completion tokens.

    ``scores[v] -= frequency_penalty * count[v] + presence_penalty * (count[v] > 0)``, where ``count[v]``
    counts token ``v`` in the completion so far (not the prompt): the formula of OpenAI's API reference
    ("Parameter details") and of vLLM's ``apply_penalties``. Counts are recomputed from ``input_ids`` on
    every call (one ``bincount``, O(completion + vocab)), so a rollback needs no bookkeeping.

    Args:
        prompt_length: tokens of ``input_ids`` that belong to the prompt (not penalised).
        presence_penalty: in ``[-2, 2]``; positive values favour new tokens.
        frequency_penalty: in ``[-2, 2]``; positive values discourage repeating tokens verbatim.

    Raises:
        ValueError: naming the argument that is out of range.

    Examples:
        >>> import torch
        >>> p = PresenceFrequencyPenaltyLogitsProcessor(1, presence_penalty=0.5, frequency_penalty=1.0)
        >>> p(torch.tensor([[0, 2, 2]]), torch.zeros(1, 3)).tolist()
        [[0.0, 0.0, -2.5]]
    """

    def __init__(self, prompt_length: int, presence_penalty: float, frequency_penalty: float) -> None:
        if not _is_int(prompt_length) or prompt_length < 0:
            raise ValueError(f"prompt_length must be an int >= 0, got {prompt_length!r}")
        for name, value in (("presence_penalty", presence_penalty), ("frequency_penalty", frequency_penalty)):
            if not _is_number(value) or not -MAX_PENALTY <= value <= MAX_PENALTY:
                raise ValueError(f"{name} must be a number in [-2, 2], got {value!r}")
        self.prompt_length = prompt_length
        self.presence_penalty = float(presence_penalty)
        self.frequency_penalty = float(frequency_penalty)

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor) -> torch.FloatTensor:
        """Penalised scores.

        Args:
            input_ids: ``(batch_size, sequence_length)`` int64, prompt then completion.
            scores: ``(batch_size, vocab_size)`` float logits.

        Returns:
            New ``(batch_size, vocab_size)`` scores (the input is not modified).
        """
        vocab_size = scores.shape[-1]
        completion = input_ids[:, self.prompt_length:]
        counts = torch.stack([torch.bincount(row, minlength=vocab_size)[:vocab_size] for row in completion])
        counts = counts.to(scores.dtype)
        penalised = scores - self.frequency_penalty * counts - self.presence_penalty * (counts > 0).to(scores.dtype)
        # transformers types a logits processor's scores as FloatTensor, which torch's ops never return.
        return cast(torch.FloatTensor, penalised)


def build_warpers(params: SamplingParams, vocab_size: int) -> LogitsProcessorList:
    """The warpers applied after the masks (empty for greedy decoding), then the watermark.

    Args:
        params: the request's parameters.
        vocab_size: ``model.config.get_text_config().vocab_size`` (what ``generate`` seeds the watermark with).
    """
    out = LogitsProcessorList()
    if not params.greedy:
        if params.temperature != 1.0:
            out.append(TemperatureLogitsWarper(float(params.temperature)))
        if params.top_k:
            out.append(TopKLogitsWarper(params.top_k))
        if params.top_p < 1.0:
            out.append(TopPLogitsWarper(params.top_p))
        if params.min_p > 0.0:
            out.append(MinPLogitsWarper(params.min_p))
    if params.watermark:
        out.append(watermark_processor(vocab_size, params.watermark_key))
    return out


class TokenPicker:
    """Greedy or seeded sampling over final scores.

    Args:
        params: ``temperature == 0`` picks the argmax; otherwise draws with a ``torch.Generator`` seeded by
            ``params.seed`` (a fresh random seed when ``None``).
    """

    def __init__(self, params: SamplingParams):
        self.greedy = params.greedy
        self.generator = torch.Generator()
        if params.seed is None:
            self.generator.seed()
        else:
            self.generator.manual_seed(params.seed)

    def pick(self, scores: torch.Tensor) -> int | None:
        """A token id from ``scores`` (``(1, vocab)`` float), or ``None`` when every score is ``-inf``.

        Scores of ``+inf`` (a processor overflowed: ``repetition_penalty`` near 0 divides by ~0) are
        answered with the argmax, softmax's limit as the scores grow; NaN scores count as ``-inf``. So
        no accepted parameter can make ``torch.multinomial`` fail.
        """
        scores = torch.nan_to_num(scores, nan=-math.inf, posinf=math.inf, neginf=-math.inf)
        best = int(scores.argmax())
        top = scores[0, best]
        if top == -math.inf:
            return None
        if self.greedy or top == math.inf:
            return best
        probs = torch.softmax(scores, dim=-1)
        return int(torch.multinomial(probs, 1, generator=self.generator))


class BanMask:
    """Sets banned ids to ``-inf`` in a scores row, with the index tensor rebuilt only when the ids change.

    The guard session returns the same ``int64`` array object while the bans in force do not change
    (:meth:`~guardrail.guard.session.GuardSession.banned_ids`), so the tensor is cached by identity:
    ``torch.from_numpy`` (no copy) runs once per change, not once per step.
    """

    def __init__(self) -> None:
        self._ids: object = None
        self._index: torch.Tensor | None = None

    def apply(self, scores: torch.Tensor, banned_ids) -> torch.Tensor:
        """Mask ``scores`` (``(rows, vocab)`` float) in place at ``banned_ids`` (``int64 (k,)`` numpy array)
        in every row; returns ``scores``."""
        if banned_ids is not self._ids:
            self._ids = banned_ids
            self._index = torch.from_numpy(banned_ids) if len(banned_ids) else None
        if self._index is not None:
            scores.index_fill_(1, self._index, -math.inf)
        return scores
