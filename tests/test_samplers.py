"""Samplers on hand-made logits: exactly which positions commit, and to which tokens."""

from __future__ import annotations

import math

import pytest
import torch

from engine.samplers import (
    adjust_logits,
    propose,
    select_entropy,
    select_threshold,
    select_topk,
    step,
)
from engine.types import SamplerSettings


def positions(mask: torch.Tensor) -> list[int]:
    return mask.nonzero().squeeze(-1).tolist()


def test_propose_greedy_takes_argmax_with_its_probability_and_entropy() -> None:
    logits = torch.tensor([[1.0, 3.0, 2.0], [0.0, 0.0, 0.0]])
    tokens, confidence, entropy = propose(logits, temperature=0.0)
    assert tokens.tolist() == [1, 0]  # a tie goes to the lowest id
    z = math.exp(1) + math.exp(3) + math.exp(2)
    assert confidence[0].item() == pytest.approx(math.exp(3) / z)
    assert confidence[1].item() == pytest.approx(1 / 3)
    assert entropy[1].item() == pytest.approx(math.log(3))


def test_propose_with_temperature_is_deterministic_under_a_seed() -> None:
    logits = torch.zeros(64, 100)
    draw = [propose(logits, 1.0, torch.Generator().manual_seed(s))[0].tolist() for s in (7, 7, 8)]
    assert draw[0] == draw[1]
    assert draw[0] != draw[2]
    # A dominant token is drawn whatever the seed.
    peaked = torch.full((4, 10), -50.0)
    peaked[:, 3] = 50.0
    assert propose(peaked, 0.7, torch.Generator().manual_seed(1))[0].tolist() == [3, 3, 3, 3]


def test_topk_commits_the_k_most_confident_masked_positions() -> None:
    confidence = torch.tensor([0.5, 0.9, 0.7, 0.99])
    masked = torch.tensor([True, True, True, False])  # position 3 is already committed
    assert positions(select_topk(confidence, masked, 2)) == [1, 2]
    assert positions(select_topk(confidence, masked, 10)) == [0, 1, 2]
    # Ties go to the earlier position.
    tied = torch.tensor([0.8, 0.8, 0.1])
    assert positions(select_topk(tied, torch.ones(3, dtype=bool), 1)) == [0]


def test_threshold_commits_every_confident_position_and_at_least_one() -> None:
    masked = torch.tensor([True, True, True, False])
    confidence = torch.tensor([0.95, 0.5, 0.92, 0.99])
    assert positions(select_threshold(confidence, masked, 0.9)) == [0, 2]
    low = torch.tensor([0.3, 0.6, 0.5, 0.99])
    assert positions(select_threshold(low, masked, 0.9)) == [1]
    assert positions(select_threshold(low, masked, 0.9, min_commit=2)) == [1, 2]


def test_entropy_bound_commits_lowest_entropy_while_sum_minus_max_within_gamma() -> None:
    entropy = torch.tensor([0.05, 0.5, 0.02, 0.08, 0.0])
    masked = torch.tensor([True, True, True, True, False])
    # Ascending: 0.02 (2), 0.05 (0), 0.08 (3), 0.5 (1); sum - max: 0, 0.02, 0.07, 0.15.
    assert positions(select_entropy(entropy, masked, 0.1)) == [0, 2, 3]
    assert positions(select_entropy(entropy, masked, 0.0)) == [2]
    assert positions(select_entropy(entropy, masked, 1.0)) == [0, 1, 2, 3]
    assert positions(select_entropy(entropy, masked, 0.0, min_commit=2)) == [0, 2]


def test_adjust_logits_penalizes_and_bans_without_touching_the_input() -> None:
    logits = torch.tensor([[1.0, 2.0, 3.0, 4.0]])
    out = adjust_logits(logits, penalized=[0, 3], penalty=1.5, banned=[2])
    assert out.tolist() == [[-0.5, 2.0, float("-inf"), 2.5]]
    assert logits.tolist() == [[1.0, 2.0, 3.0, 4.0]]


def test_step_with_topk_settings_commits_tokens_of_the_chosen_positions() -> None:
    logits = torch.tensor([
        [0.0, 4.0, 0.0],  # confident: token 1
        [1.0, 1.1, 1.0],  # unsure
        [0.0, 0.0, 9.0],  # most confident: token 2
    ])
    commit, tokens = step(logits, torch.ones(3, dtype=bool), SamplerSettings(sampler="topk", k=2))
    assert positions(commit) == [0, 2]
    assert tokens[commit].tolist() == [1, 2]


def test_step_threshold_and_entropy_on_two_sure_and_two_unsure_positions() -> None:
    logits = torch.tensor([[0.0, 20.0], [0.0, 0.1], [20.0, 0.0], [0.1, 0.0]])
    masked = torch.ones(4, dtype=bool)
    commit, tokens = step(logits, masked, SamplerSettings(sampler="threshold"))
    assert positions(commit) == [0, 2]
    assert tokens.tolist() == [1, 1, 0, 0]
    # The bound excludes the largest accepted entropy, so one unsure position (the earlier of
    # the two equal ones) comes along with the two sure ones.
    commit, _ = step(logits, masked, SamplerSettings(sampler="entropy", gamma=0.1))
    assert positions(commit) == [0, 1, 2]


def test_unknown_sampler_is_refused() -> None:
    with pytest.raises(ValueError, match="unknown sampler 'beam'"):
        step(torch.zeros(1, 2), torch.ones(1, dtype=bool), SamplerSettings(sampler="beam"))
