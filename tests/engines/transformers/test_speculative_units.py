"""Drafting units: the prompt-lookup index (extend, propose, rollback), the width choice, and the acceptance
rule (draw x ~ p, accept iff x == draft) against the standard speculative-sampling rule."""

import numpy as np
import pytest
import torch

from guardrail.engines.drafting import PromptLookup, SpeculativeConfig, VerifyCost, draft_width, expected_tokens


def test_prompt_lookup_proposes_what_followed_the_latest_earlier_match_longest_ngram_first():
    lookup = PromptLookup(ngram_max=3, ngram_min=2)
    lookup.extend([1, 2, 3, 4, 5, 9, 2, 3, 7, 8, 1, 2, 3])
    # Suffix (1, 2, 3) occurred at the start -> 4, 5, 9, ...; the 2-gram (2, 3) also occurred later (-> 7, 8)
    # but the longer match wins.
    assert lookup.propose(3) == [4, 5, 9]
    lookup.extend([6])  # suffix (3, 6) and (2, 3, 6): never seen
    assert lookup.propose(3) == []
    assert lookup.propose(0) == []


def test_prompt_lookup_rollback_undoes_the_index():
    lookup = PromptLookup(ngram_max=3, ngram_min=2)
    lookup.extend([1, 2, 3, 4])
    before = {key: list(value) for key, value in lookup._index.items()}
    lookup.extend([1, 2, 3])
    assert lookup.propose(2) == [4, 1]
    lookup.rollback_to(4)
    assert lookup.tokens == [1, 2, 3, 4] and dict(lookup._index) == before
    lookup.extend([9, 9])
    assert lookup.propose(2) == []


def test_the_width_grows_with_the_acceptance_rate_and_is_zero_when_drafts_do_not_pay():
    cost = VerifyCost()
    widths = [draft_width(a, 8, 4, cost) for a in (0.0, 0.1, 0.5, 0.9, 1.0)]
    assert widths[0] == 0 and widths[-1] == 4
    assert widths == sorted(widths)
    assert draft_width(1.0, 2, 4, cost) == 2  # never more than proposed
    assert draft_width(1.0, 8, 3, cost) == 3  # nor more than the limit
    assert cost.of(0) == 1.0 and cost.of(2, rows=8) > cost.of(2, rows=1) > 1.0
    assert expected_tokens(0.5, 0) == 1.0 and expected_tokens(0.5, 2) == 1.75 and expected_tokens(1.0, 4) == 5.0


def test_config_is_checked():
    with pytest.raises(ValueError, match="num_tokens"):
        SpeculativeConfig(num_tokens=-1)
    with pytest.raises(ValueError, match="ngram"):
        SpeculativeConfig(ngram_min=3, ngram_max=2)


def test_draw_and_compare_is_the_standard_acceptance_rule_for_a_point_mass_draft():
    """Standard rule (Leviathan et al. 2023) with q = one-hot(d): accept d w.p. min(1, p(d)/q(d)) = p(d), else
    draw from norm(max(0, p - q)). Its output distribution and acceptance rate are computed exactly here and
    compared with 200,000 seeded draws of what the decode loop does (x ~ p; accepted iff x == d)."""
    generator = torch.Generator().manual_seed(0)
    logits = torch.randn(12, generator=generator) * 2
    p = torch.softmax(logits, dim=0).double()
    draft = int(torch.argsort(p)[6])  # a middling token, not the mode
    q = torch.zeros_like(p)
    q[draft] = 1.0
    accept = min(1.0, float(p[draft] / q[draft]))
    residual = torch.clamp(p - q, min=0)
    standard = accept * q + (1 - accept) * residual / residual.sum()

    draws = torch.multinomial(p.float(), 200_000, replacement=True, generator=generator).numpy()
    observed = np.bincount(draws, minlength=len(p)) / len(draws)
    assert np.allclose(observed, standard.numpy(), atol=0.005)  # output distribution = the target's p
    assert abs((draws == draft).mean() - accept) < 0.005  # the acceptance rate is p(d)
    assert np.allclose(standard.numpy(), p.numpy())
