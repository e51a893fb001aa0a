"""MaskWriter: the batch's masked ids written into the logits in one indexed write, tensors kept per version.

Driven by a real BatchGuard over the bundled `en` list on SmolLM2's vocab, so the index is what the engines
write; the logits are CPU tensors (a CUDA device is measured by bench/gpu_check.sh, not tested here).
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from guardrail.engines.mask_write import MaskWriter
from guardrail.guard.batch import BatchGuard, MaskIndex, MaskRow, MaskTable, always_banned_ids
from guardrail.matching.compiler import compile_artefact
from guardrail.wordlists.wordlist import bundled_wordlist


def _index(rows: list[int], cols: list[int], version: int) -> MaskIndex:
    return MaskIndex(np.array(rows, dtype=np.int64), np.array(cols, dtype=np.int64), version)


def test_writes_minus_inf_exactly_at_the_index():
    logits = torch.zeros((3, 10))
    writer = MaskWriter(torch.device("cpu"))
    assert writer.write(logits, _index([0, 2, 2], [1, 9, 4], 1)) is logits
    expected = torch.zeros((3, 10))
    expected[0, 1] = expected[2, 9] = expected[2, 4] = -math.inf
    assert torch.equal(logits, expected)


def test_an_empty_index_writes_nothing():
    logits = torch.ones((2, 5))
    MaskWriter(torch.device("cpu")).write(logits, _index([], [], 1))
    assert torch.equal(logits, torch.ones((2, 5)))


def test_the_same_version_reuses_the_tensors_a_new_one_rebuilds_them():
    writer = MaskWriter(torch.device("cpu"))
    writer.write(torch.zeros((2, 4)), _index([0], [1], 7))
    # Same version, different arrays: the writer trusts the version (MaskIndex's contract) and keeps its tensors.
    logits = torch.zeros((2, 4))
    writer.write(logits, _index([1], [3], 7))
    assert logits[0, 1] == -math.inf and logits[1, 3] == 0
    logits = torch.zeros((2, 4))
    writer.write(logits, _index([1], [3], 8))
    assert logits[1, 3] == -math.inf and logits[0, 1] == 0


def test_an_index_outside_the_logits_raises():
    with pytest.raises(IndexError):
        MaskWriter(torch.device("cpu")).write(torch.zeros((2, 4)), _index([2], [0], 1))


@pytest.fixture(scope="module")
def en_artefact(smollm2_vocab):
    return compile_artefact(smollm2_vocab, [bundled_wordlist("en")])


def test_matches_the_rows_masks_through_a_batch_guard(smollm2_vocab, smollm2_tokenizer, en_artefact):
    """Each row's logits get exactly its own mask (per-state ids and always-banned ids), across steps."""
    table = MaskTable.of(en_artefact, smollm2_vocab.eos_ids)
    always = always_banned_ids(en_artefact, len(smollm2_vocab))
    texts = [" you are a fu", " the class", " what a sh"]
    outputs: list[list[int]] = [[] for _ in texts]
    batch = BatchGuard()
    for index, tokens in enumerate(outputs):
        batch.add(index, MaskRow(table, tokens, always))
    writer = MaskWriter(torch.device("cpu"))
    masked_somewhere = False
    streams = [smollm2_tokenizer.encode(text, add_special_tokens=False) for text in texts]
    for step in range(max(map(len, streams))):
        for tokens, stream in zip(outputs, streams):
            if step < len(stream):
                tokens.append(stream[step])
        logits = torch.zeros((len(texts), len(smollm2_vocab)))
        writer.write(logits, batch.step())
        for index in range(len(texts)):
            masked = set(np.flatnonzero(torch.isinf(logits[index]).numpy()).tolist())
            assert masked == set(batch[index].mask_ids().tolist())
            masked_somewhere |= bool(masked)
    assert masked_somewhere  # the texts reach states that mask something (else the test proves little)
