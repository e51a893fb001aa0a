"""Sampling parameters and guard options of one request, engine-neutral: validated once here, read by every
engine (transformers single and batched, vLLM, the HTTP gateway), the service and :mod:`guardrail.api`.

Field names and ranges follow OpenAI's API and vLLM's ``SamplingParams`` (vllm/sampling_params.py); each
engine maps them to its own processors (:mod:`guardrail.engines.transformers.sampling` for transformers).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, fields
from typing import Literal, TypeGuard, get_args

from guardrail.grammar.format import StructuredOutput

#: ``off``: terms keep their own match mode; ``substring``: a term that caused a rollback is also matched
#: as a substring (glued and underscore-joined forms) from where it began; ``edit``: also one edit of
#: tolerance for terms of :data:`~guardrail.guard.escalation.MIN_EDIT_CHARS` letters or more (misspelled
#: forms: "SOORY", "WELCOM").
EvasionGuard = Literal["off", "substring", "edit"]
EVASION_GUARD_MODES: tuple[str, ...] = get_args(EvasionGuard)
#: On by default: on the leak suite it removes the glued and underscore-joined forms at no cost for requests
#: that never hit (docs/design.md §5, bench/decode.py ``evasion``; the guard itself is
#: :mod:`guardrail.guard.escalation`).
DEFAULT_EVASION_GUARD: EvasionGuard = "substring"


def check_evasion_guard(value: object) -> EvasionGuard:
    """``value`` as an :data:`EvasionGuard` mode.

    Raises:
        ValueError: not one of :data:`EVASION_GUARD_MODES` (the message names ``evasion_guard``).
    """
    if value not in EVASION_GUARD_MODES:
        raise ValueError(f"evasion_guard must be one of {list(EVASION_GUARD_MODES)}, got {value!r}")
    return value  # type: ignore[return-value]  # checked against the Literal's values just above


#: The watermark's default hashing key: transformers' default (the millionth prime). A deployment should pass
#: its own secret key.
DEFAULT_HASHING_KEY = 15485863

#: OpenAI's range for ``logit_bias`` values.
MAX_LOGIT_BIAS = 100.0
MAX_STOP_STRINGS = 16
#: Most alternatives per position: OpenAI's ``top_logprobs`` limit, and vLLM's default ``max_logprobs``.
MAX_TOP_LOGPROBS = 20
#: OpenAI's range for ``presence_penalty`` and ``frequency_penalty``.
MAX_PENALTY = 2.0
#: Temperatures below this are greedy decoding: vLLM's ``_SAMPLING_EPS`` (vllm/sampling_params.py). Dividing
#: logits by 1e-40 overflows to inf and softmax then yields NaN.
GREEDY_TEMPERATURE = 1e-5


def is_int(value: object) -> TypeGuard[int]:
    """An int that is not a bool (JSON ``true`` must not pass as 1)."""
    return isinstance(value, int) and not isinstance(value, bool)


def is_number(value: object) -> bool:
    """A finite int or float that is not a bool."""
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _token_ids(name: str, values: Iterable[object]) -> tuple[int, ...]:
    ids: list[int] = []
    for value in values:
        if not is_int(value) or value < 0:
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
        response_format: the answer must be JSON (:class:`~guardrail.grammar.format.StructuredOutput`;
            OpenAI's ``response_format`` object is accepted and parsed); ``None``: free text. Only the
            transformers engine implements it (docs/structured-output.md).
        logprobs: ``None`` (default): no log-probabilities, no cost; ``k`` in ``[0, 20]``: the delivered
            tokens' log-probabilities with the ``k`` most likely alternatives at each position (vLLM's
            ``SamplingParams.logprobs``; :mod:`guardrail.guard.logprobs`). From the model's raw distribution
            (vLLM's default ``logprobs_mode="raw_logprobs"``): see docs/design.md.

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
    response_format: StructuredOutput | None = None
    logprobs: int | None = None

    def __post_init__(self) -> None:
        def set_(name: str, value: object) -> None:
            object.__setattr__(self, name, value)

        if not isinstance(self.speculative, bool):
            raise ValueError(f"speculative must be a bool, got {self.speculative!r}")
        if not is_int(self.max_tokens) or self.max_tokens < 1:
            raise ValueError(f"max_tokens must be an int >= 1, got {self.max_tokens!r}")
        if not is_number(self.temperature) or self.temperature < 0:
            raise ValueError(f"temperature must be a number >= 0, got {self.temperature!r}")
        if not is_number(self.top_p) or not 0 < self.top_p <= 1:
            raise ValueError(f"top_p must be in (0, 1], got {self.top_p!r}")
        if not is_int(self.top_k) or self.top_k < 0:
            raise ValueError(f"top_k must be an int >= 0, got {self.top_k!r}")
        if not is_number(self.min_p) or not 0 <= self.min_p <= 1:
            raise ValueError(f"min_p must be in [0, 1], got {self.min_p!r}")
        if self.seed is not None and (not is_int(self.seed) or not 0 <= self.seed < 2**63):
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
            if not is_int(token) or token < 0:
                raise ValueError(f"logit_bias: keys must be token ids (ints >= 0), got {key!r}")
            if not is_number(value) or not -MAX_LOGIT_BIAS <= value <= MAX_LOGIT_BIAS:
                raise ValueError(f"logit_bias[{key!r}] must be a number in [-100, 100], got {value!r}")
            bias[token] = float(value)
        set_("logit_bias", bias)
        bad = tuple(_token_ids("bad_words_ids", seq) for seq in self.bad_words_ids)
        if any(not seq for seq in bad):
            raise ValueError(f"bad_words_ids: sequences must not be empty, got {self.bad_words_ids!r}")
        set_("bad_words_ids", bad)
        set_("suppress_tokens", _token_ids("suppress_tokens", self.suppress_tokens))
        set_("begin_suppress_tokens", _token_ids("begin_suppress_tokens", self.begin_suppress_tokens))
        if not is_number(self.repetition_penalty) or self.repetition_penalty <= 0:
            raise ValueError(f"repetition_penalty must be a number > 0, got {self.repetition_penalty!r}")
        for name in ("presence_penalty", "frequency_penalty"):
            value = getattr(self, name)
            if not is_number(value) or not -MAX_PENALTY <= value <= MAX_PENALTY:
                raise ValueError(f"{name} must be a number in [-2, 2], got {value!r}")
        if not is_int(self.min_tokens) or not 0 <= self.min_tokens <= self.max_tokens:
            raise ValueError(f"min_tokens must be an int in [0, max_tokens={self.max_tokens}], got {self.min_tokens!r}")
        set_("stop_token_ids", _token_ids("stop_token_ids", self.stop_token_ids))
        if not isinstance(self.ignore_eos, bool):
            raise ValueError(f"ignore_eos must be a bool, got {self.ignore_eos!r}")
        if not isinstance(self.watermark, bool):
            raise ValueError(f"watermark must be a bool, got {self.watermark!r}")
        if not is_int(self.watermark_key) or self.watermark_key <= 0:
            raise ValueError(f"watermark_key must be an int > 0, got {self.watermark_key!r}")
        if not is_int(self.max_rollbacks) or self.max_rollbacks < 0:
            raise ValueError(f"max_rollbacks must be an int >= 0, got {self.max_rollbacks!r}")
        if not is_int(self.max_rollbacks_per_position) or self.max_rollbacks_per_position < 0:
            raise ValueError(f"max_rollbacks_per_position must be an int >= 0, got {self.max_rollbacks_per_position!r}")
        if not is_number(self.timeout_s) or self.timeout_s <= 0:
            raise ValueError(f"timeout_s must be a number > 0, got {self.timeout_s!r}")
        check_evasion_guard(self.evasion_guard)
        if isinstance(self.response_format, Mapping):
            set_("response_format", StructuredOutput.from_response_format(self.response_format))
        elif self.response_format is not None and not isinstance(self.response_format, StructuredOutput):
            raise ValueError(f"response_format must be a StructuredOutput or an OpenAI response_format object, "
                             f"got {self.response_format!r}")
        if self.logprobs is not None and (not is_int(self.logprobs) or not 0 <= self.logprobs <= MAX_TOP_LOGPROBS):
            raise ValueError(f"logprobs must be None or an int in [0, {MAX_TOP_LOGPROBS}], got {self.logprobs!r}")

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
