"""Samplers on hand-made logits: exactly which positions commit, and to which tokens."""

from __future__ import annotations

import json
import math

import pytest
import torch

from engine.decode.policy import FEATURES, POLICY_FILE, CommitPolicy, load_policy, policy_features
from engine.decode.samplers import (
    adjust_logits,
    propose,
    select_entropy,
    select_learned,
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


@pytest.mark.parametrize("temperature", [0.0, 0.8])
def test_propose_without_entropy_gives_the_same_tokens_and_confidence(temperature: float) -> None:
    # The samplers that never read the entropy skip it (its log over the vocabulary is most
    # of a CPU step's sampling): the tokens and their probabilities stay the very same.
    logits = torch.randn(5, 300, generator=torch.Generator().manual_seed(3))
    full = propose(logits, temperature, torch.Generator().manual_seed(9))
    lean = propose(logits, temperature, torch.Generator().manual_seed(9), entropy=False)
    assert torch.equal(full[0], lean[0]) and torch.equal(full[1], lean[1])
    assert bool(lean[2].isnan().all()) and not bool(full[2].isnan().any())


@pytest.mark.parametrize("sampler", ["topk", "threshold", "entropy", "learned"])
def test_a_step_computes_the_entropy_only_for_the_rules_that_read_it(
        sampler: str, monkeypatch: pytest.MonkeyPatch) -> None:
    import engine.decode.samplers as samplers

    asked: list[bool] = []
    real = samplers.propose
    monkeypatch.setattr(samplers, "propose", lambda *a, entropy=True: asked.append(entropy)
                        or real(*a, entropy=entropy))
    step(torch.randn(4, 50), torch.ones(4, dtype=torch.bool), SamplerSettings(sampler=sampler))
    assert asked == [sampler in ("entropy", "learned")]


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
    commit, tokens, _ = step(logits, torch.ones(3, dtype=bool),
                             SamplerSettings(sampler="topk", k=2))
    assert positions(commit) == [0, 2]
    assert tokens[commit].tolist() == [1, 2]


def test_step_threshold_and_entropy_on_two_sure_and_two_unsure_positions() -> None:
    logits = torch.tensor([[0.0, 20.0], [0.0, 0.1], [20.0, 0.0], [0.1, 0.0]])
    masked = torch.ones(4, dtype=bool)
    commit, tokens, _ = step(logits, masked, SamplerSettings(sampler="threshold"))
    assert positions(commit) == [0, 2]
    assert tokens.tolist() == [1, 1, 0, 0]
    # The bound excludes the largest accepted entropy, so one unsure position (the earlier of
    # the two equal ones) comes along with the two sure ones.
    commit, _, _ = step(logits, masked, SamplerSettings(sampler="entropy", gamma=0.1))
    assert positions(commit) == [0, 1, 2]


def test_unknown_sampler_is_refused() -> None:
    with pytest.raises(ValueError, match="unknown sampler 'beam'"):
        step(torch.zeros(1, 2), torch.ones(1, dtype=bool), SamplerSettings(sampler="beam"))


def _policy_on(feature: int, weight: float = 10.0) -> CommitPolicy:
    """A hand-made logistic policy: probability sigmoid(weight * features[:, feature])."""
    w = torch.zeros(1, len(FEATURES))
    w[0, feature] = weight
    return CommitPolicy(torch.zeros(len(FEATURES)), torch.ones(len(FEATURES)),
                        [(w, torch.zeros(1))])


def test_learned_commits_what_the_policy_says_and_at_least_the_most_confident() -> None:
    masked = torch.tensor([True, True, True, True, False])
    confidence = torch.tensor([0.2, 0.6, 0.3, 0.4, 0.99])
    probability = torch.tensor([0.9, 0.1, 0.7, 0.2, 0.95])
    assert positions(select_learned(probability, confidence, masked, 0.5)) == [0, 1, 2]
    assert positions(select_learned(probability, confidence, masked, 0.8)) == [0, 1]
    # Nothing above the cutoff: the most confident masked position, never a committed one.
    assert positions(select_learned(probability, confidence, masked, 0.99)) == [1]
    assert positions(select_learned(probability, confidence, masked, 0.99, min_commit=2)) == [1, 3]


def test_learned_policy_reads_hand_made_features() -> None:
    # A policy that commits exactly the positions whose left neighbour is settled.
    policy = _policy_on(FEATURES.index("left_settled"), weight=10.0)
    features = torch.zeros(4, len(FEATURES))
    features[:, FEATURES.index("left_settled")] = torch.tensor([1.0, 0.0, 1.0, 0.0])
    probability = policy.probability(features)
    assert probability.tolist() == pytest.approx([1 / (1 + math.exp(-10)), 0.5] * 2)
    masked = torch.ones(4, dtype=bool)
    confidence = torch.tensor([0.1, 0.9, 0.2, 0.3])
    assert positions(select_learned(probability, confidence, masked, 0.6)) == [0, 1, 2]


def test_policy_features_of_a_masked_range() -> None:
    logits = torch.log(torch.tensor([[0.7, 0.2, 0.1], [0.5, 0.25, 0.25], [0.1, 0.1, 0.8],
                                     [0.4, 0.4, 0.2]]))
    masked = torch.tensor([True, False, True, True])
    tokens, confidence, entropy = propose(logits, 0.0)
    f = policy_features(logits, tokens, confidence, entropy, masked,
                        stop_ids=torch.tensor([2]), fresh=True)
    col = {name: f[:, i].tolist() for i, name in enumerate(FEATURES)}
    assert col["confidence"] == pytest.approx([0.7, 0.5, 0.8, 0.4])
    assert col["margin"] == pytest.approx([0.5, 0.25, 0.7, 0.0], abs=1e-6)
    assert col["left_settled"] == [1.0, 0.0, 1.0, 0.0]
    assert col["masked_left"] == pytest.approx([0.0, 1 / 3, 1 / 3, 2 / 3])
    assert col["masked_count"] == pytest.approx([math.log(4)] * 4)
    assert col["stop"] == [0.0, 0.0, 1.0, 0.0]
    assert col["fresh"] == [1.0] * 4


def test_step_with_the_learned_sampler_commits_at_least_one_position_every_step() -> None:
    logits = torch.zeros(6, 5)  # nothing confident anywhere
    masked = torch.ones(6, dtype=bool)
    for cutoff in (0.0, 0.5, 1.0):
        settings = SamplerSettings(sampler="learned", cutoff=cutoff)
        while bool(masked.any()):
            commit, _, _ = step(logits, masked, settings)
            assert int(commit.sum()) >= 1 and not bool((commit & ~masked).any())
            masked = masked & ~commit
        masked = torch.ones(6, dtype=bool)


def test_the_shipped_commit_policy_loads() -> None:
    policy = load_policy()
    assert policy.mean.shape == (len(FEATURES),)
    data = json.loads(POLICY_FILE.read_text())
    assert data["features"] == list(FEATURES)
    assert POLICY_FILE.stat().st_size < 8192
    p = policy.probability(torch.zeros(3, len(FEATURES)))
    assert p.shape == (3,) and bool(((p >= 0) & (p <= 1)).all())


def test_commit_policy_training_reproduces_from_its_seed() -> None:
    from engine.train.commit_policy import fit

    g = torch.Generator().manual_seed(0)
    x = torch.rand(400, len(FEATURES), generator=g)
    labels = (x[:, 0] + 0.2 * torch.rand(400, generator=g) > 0.6).float()
    data = {"features": x, "labels": labels, "holes": torch.arange(400) // 10}
    first, report = fit(data, hidden=3, seed=5, epochs=200)
    again, _ = fit(data, hidden=3, seed=5, epochs=200)
    other, _ = fit(data, hidden=3, seed=6, epochs=200)
    assert first.to_json() == again.to_json()
    assert first.to_json() != other.to_json()
    # Confidence decides these labels: the policy learns it.
    assert report["val_accuracy"] > 0.85
    assert CommitPolicy.from_json(first.to_json()).probability(x).tolist() == \
        first.probability(x).tolist()


def test_recording_observes_every_step_and_leaves_no_observer_behind(dream_ckpt) -> None:
    """engine.train.commit_policy sees each step's sampler input through the engine's step
    observers (no patching): at top-k k=1 the masked count falls by one per step."""
    from engine import Engine
    from engine.decode.denoise import STEP_OBSERVERS
    from engine.train.commit_policy import recording
    from engine.types import InfillRequest

    engine = Engine.load(str(dream_ckpt), device="cpu", dtype="float32")
    settings = SamplerSettings(sampler="topk", k=1, cache_refresh=1, stop_run=False)
    steps: list[dict[str, torch.Tensor]] = []
    with recording(steps):
        *_, last = engine.infill_stream(InfillRequest("x = ", "\n", 6, settings),
                                        stop_early=False)
    assert STEP_OBSERVERS == []
    assert len(steps) == last.step == 6
    assert [int(s["masked"].sum()) for s in steps] == [6, 5, 4, 3, 2, 1]
    assert all(s["features"].shape == (s["masked"].shape[0], len(FEATURES)) for s in steps)
