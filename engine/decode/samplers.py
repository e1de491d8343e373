"""Parallel unmasking: which hole positions to commit this step, and to which tokens.

Pure functions on the logits of the hole positions ([n, V], one row per hole position).
A step first draws a candidate token for every position (`propose`: greedy at temperature 0,
else a seeded draw) with its confidence (probability of the drawn token) and the entropy of
the position's distribution, then a rule picks the still-masked positions to commit:

    topk       the k most confident (LLaDA's low-confidence remasking baseline)
    threshold  every position with confidence >= tau (Fast-dLLM)
    entropy    the lowest-entropy positions while sum(entropy) - max(entropy) <= gamma (EB)
    learned    every position a small classifier over per-position features (engine.decode.policy)
               gives probability >= cutoff that its proposal is final (Learn2PD)

Every rule commits at least `min_commit` positions (at least one), so a hole of n tokens
takes at most n steps. Ties go to the earlier position, so results never depend on the
order a kernel happens to sort in.
"""

from __future__ import annotations

import math
from collections.abc import Iterable

import torch
from torch import Tensor

from engine.decode.policy import load_policy, policy_features
from engine.kernels import fused_stats
from engine.types import SAMPLERS, SamplerSettings

# The rules that read each position's entropy; the others' steps skip computing it.
NEEDS_ENTROPY = ("entropy", "learned")


def adjust_logits(
    logits: Tensor,
    penalized: Iterable[int] = (),
    penalty: float = 0.0,
    banned: Iterable[int] = (),
) -> Tensor:
    """Subtract `penalty` from the `penalized` tokens' logits and forbid the `banned` ones."""
    logits = logits.clone()
    penalized, banned = list(penalized), list(banned)
    if penalty and penalized:
        logits[:, penalized] -= penalty
    if banned:
        logits[:, banned] = float("-inf")
    return logits


def allowed_mask(ids: frozenset[int] | None, vocab_size: int, device: torch.device | str
                 ) -> Tensor | None:
    """A [V] bool mask of the token ids a hole may hold (engine.text.canvas.Canvas.allowed);
    None when any may be."""
    if ids is None:
        return None
    mask = torch.zeros(vocab_size, dtype=torch.bool, device=device)
    mask[[i for i in ids if 0 <= i < vocab_size]] = True
    return mask


def propose(
    logits: Tensor, temperature: float, generator: torch.Generator | None = None,
    entropy: bool = True,
) -> tuple[Tensor, Tensor, Tensor]:
    """(tokens, confidence, entropy), each [n], from float logits [n, V]; `entropy=False`:
    the entropy may be NaN, not computed (engine.kernels.sampling.torch_stats).

    Greedy (temperature 0, the interactive default): the argmax logit, lowest id on ties, in
    one fused pass over the vocabulary where a triton kernel runs (engine.kernels). A draw
    stays in torch: `torch.multinomial` on torch's own probabilities is what makes a seed
    reproduce a run, and a fused draw (Gumbel-max in the kernel) would be a different random
    stream.
    """
    if temperature <= 0:
        return fused_stats(logits, entropy=entropy)
    probs = torch.softmax(logits.float() / temperature, dim=-1)
    tokens = torch.multinomial(probs, 1, generator=generator).squeeze(-1)
    confidence = probs.gather(-1, tokens[:, None]).squeeze(-1)
    if not entropy:
        return tokens, confidence, torch.full_like(confidence, math.nan)
    logp = torch.log(probs.clamp_min(torch.finfo(probs.dtype).tiny))
    return tokens, confidence, -(probs * logp).sum(-1)


def _rank(score: Tensor, masked: Tensor, descending: bool) -> Tensor:
    """Masked positions ordered by score; ties keep position order (stable sort)."""
    idx = masked.nonzero().squeeze(-1)
    order = torch.sort(score[idx], descending=descending, stable=True).indices
    return idx[order]


def _commit(ranked: Tensor, count: int, n: int) -> Tensor:
    mask = torch.zeros(n, dtype=torch.bool, device=ranked.device)
    mask[ranked[:count]] = True
    return mask


def select_topk(confidence: Tensor, masked: Tensor, k: int) -> Tensor:
    """Commit the k most confident masked positions."""
    ranked = _rank(confidence, masked, descending=True)
    return _commit(ranked, max(1, k), confidence.shape[0])


def select_threshold(
    confidence: Tensor, masked: Tensor, threshold: float, min_commit: int = 1
) -> Tensor:
    """Commit every masked position with confidence >= threshold, at least `min_commit`."""
    ranked = _rank(confidence, masked, descending=True)
    above = int((confidence[ranked] >= threshold).sum())
    return _commit(ranked, max(above, min_commit, 1), confidence.shape[0])


def select_entropy(entropy: Tensor, masked: Tensor, gamma: float, min_commit: int = 1) -> Tensor:
    """EB-sampler: the lowest-entropy masked positions while sum - max <= gamma."""
    ranked = _rank(entropy, masked, descending=False)
    sorted_h = entropy[ranked]
    # Ascending order: the largest accepted entropy is the last one accepted.
    excess = torch.cumsum(sorted_h, 0) - sorted_h
    accepted = int((excess <= gamma).sum())
    return _commit(ranked, max(accepted, min_commit, 1), entropy.shape[0])


def select_learned(
    probability: Tensor, confidence: Tensor, masked: Tensor, cutoff: float, min_commit: int = 1
) -> Tensor:
    """Commit every masked position whose proposal the commit policy says is final with
    probability >= cutoff, and the `min_commit` most confident (at least one) in any case."""
    return (masked & (probability >= cutoff)) | select_topk(confidence, masked, min_commit)


def select(
    settings: SamplerSettings,
    confidence: Tensor,
    entropy: Tensor,
    masked: Tensor,
    min_commit: int = 1,
    probability: Tensor | None = None,
) -> Tensor:
    """The positions `settings.sampler` commits: bool [n], a subset of `masked`.
    `probability`: the commit policy's, per position (sampler "learned" only)."""
    if settings.sampler == "topk":
        return select_topk(confidence, masked, max(settings.k, min_commit))
    if settings.sampler == "threshold":
        return select_threshold(confidence, masked, settings.threshold, min_commit)
    if settings.sampler == "entropy":
        return select_entropy(entropy, masked, settings.gamma, min_commit)
    if settings.sampler == "learned":
        if probability is None:
            raise ValueError("the learned sampler needs the commit policy's probabilities")
        return select_learned(probability, confidence, masked, settings.cutoff, min_commit)
    raise ValueError(f"unknown sampler '{settings.sampler}' (choose from {', '.join(SAMPLERS)})")


def step(
    logits: Tensor,
    masked: Tensor,
    settings: SamplerSettings,
    generator: torch.Generator | None = None,
    min_commit: int = 1,
    stop_ids: Tensor | None = None,
    fresh: bool = False,
) -> tuple[Tensor, Tensor, Tensor]:
    """One denoising step on adjusted hole logits: (commit mask [n], proposed tokens [n],
    their confidence [n]: the probability of each proposed token, the completion's Score).

    `stop_ids` (the tokens that end a completion) and `fresh` (this pass refreshed the
    context cache) are features of the learned sampler; the other rules ignore them."""
    tokens, confidence, entropy = propose(logits, settings.temperature, generator,
                                          entropy=settings.sampler in NEEDS_ENTROPY)
    probability = None
    if settings.sampler == "learned":
        features = policy_features(logits, tokens, confidence, entropy, masked, stop_ids, fresh)
        probability = load_policy().probability(features)
    return (select(settings, confidence, entropy, masked, min_commit, probability), tokens,
            confidence)
