"""The transformers logits processors a request's :class:`~guardrail.params.SamplingParams` map to.

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
from collections.abc import Iterable, Sequence
from typing import cast

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

from guardrail.engines.mask_write import MaskWriter
from guardrail.engines.transformers.watermark import watermark_processor
from guardrail.guard.batch import BatchGuard, SessionRow
from guardrail.params import MAX_PENALTY, SamplingParams, is_int, is_number


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
        if not is_int(prompt_length) or prompt_length < 0:
            raise ValueError(f"prompt_length must be an int >= 0, got {prompt_length!r}")
        for name, value in (("presence_penalty", presence_penalty), ("frequency_penalty", frequency_penalty)):
            if not is_number(value) or not -MAX_PENALTY <= value <= MAX_PENALTY:
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
    (:meth:`~guardrail.guard.session.GuardSession.mask_ids`), so the tensor is cached by identity:
    ``torch.from_numpy`` (no copy) runs once per change, not once per step.
    """

    def __init__(self) -> None:
        self._ids: object = None
        self._index: torch.Tensor | None = None

    def apply(self, scores: torch.Tensor, mask_ids) -> torch.Tensor:
        """Mask ``scores`` (``(rows, vocab)`` float) in place at ``mask_ids`` (``int64 (k,)`` numpy array)
        in every row; returns ``scores``."""
        if mask_ids is not self._ids:
            self._ids = mask_ids
            self._index = torch.from_numpy(mask_ids) if len(mask_ids) else None
        if self._index is not None:
            scores.index_fill_(1, self._index, -math.inf)
        return scores


class BatchBanMask:
    """Masks a batch's fresh logits in one write: the embedded engines' side of the batch-level guard step
    (:class:`~guardrail.guard.batch.BatchGuard`, one :class:`~guardrail.guard.batch.SessionRow` per generation).

    After a forward pass, the logits of each row's next position get its session's ``mask_ids()`` (the
    always-banned ids; a fresh position has no bans yet), and the row is told (:attr:`Generation.premasked`),
    so that its pick does not mask them again. Rows that report logprobs are left out: their raw logprobs are
    taken before any mask. The index tensors are rebuilt only when a row's mask or the rows changed.
    """

    def __init__(self) -> None:
        self._guard = BatchGuard()
        self._members: list = []  # the generations the guard's rows were laid out for, in batch order
        self._writer: MaskWriter | None = None  # made for the device of the first logits it writes

    @torch.inference_mode()  # the kept logits are inference tensors: written in place in this mode only
    def apply(self, logits: torch.Tensor, generations: Sequence) -> torch.Tensor:
        """Mask ``logits`` (``(rows, vocab)`` float, row ``i`` the next position of ``generations[i]``, a
        :class:`~guardrail.engines.transformers.decoder.Generation`) in place; returns ``logits``."""
        members = self._members
        if len(members) != len(generations) or any(a is not b for a, b in zip(members, generations)):
            guard = self._guard = BatchGuard()
            for index, generation in enumerate(generations):
                if generation.raw_logprobs is None:
                    guard.add(index, SessionRow(generation.session))
            self._members = list(generations)
        guard = self._guard
        writer = self._writer
        if writer is None or writer.device != logits.device:
            writer = self._writer = MaskWriter(logits.device)
        writer.write(logits, guard.step())
        for index in guard:
            generation = generations[index]
            generation.premasked = (generation.session.position, guard[index].state_ids)
        return logits
