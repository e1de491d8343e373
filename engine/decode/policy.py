"""A learned commit rule (Learn2PD): a tiny classifier that says which masked positions'
current proposals are already final.

Per still-masked position of a step's masked range the sampler computes a few cheap
features (`policy_features`); the classifier maps them to the probability that the position's
proposal is the token one-token-per-pass decoding (top-k, k=1) would finally commit there.
`engine.decode.samplers.select_learned` commits the positions above a cutoff.

The classifier is trained on the CPU from the bundled model's own k=1 trajectories on this
repository's sources (`python -m engine.train.commit_policy`) and shipped as JSON beside this
module (`POLICY_FILE`): feature names, standardization, then linear layers with tanh between
them and a sigmoid at the end (one layer: logistic regression).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

POLICY_FILE = Path(__file__).with_name("commit_policy.json")

FEATURES = (
    "confidence",  # probability of the proposed token
    "margin",  # top-1 minus top-2 probability (at temperature 0)
    "entropy",  # of the position's distribution, nats
    "left_settled",  # the position to the left is committed (or the range starts here)
    "masked_left",  # share of the range's masked positions to the left of this one
    "masked_count",  # log(1 + masked positions in the range)
    "stop",  # the proposal is a stop token
    "fresh",  # this pass refreshed the context cache (its keys/values are current)
)


def policy_features(
    logits: Tensor,
    tokens: Tensor,
    confidence: Tensor,
    entropy: Tensor,
    masked: Tensor,
    stop_ids: Tensor | None = None,
    fresh: bool = False,
) -> Tensor:
    """Features [n, len(FEATURES)] of the n positions of a masked range, from its logits
    [n, V] and the step's proposals (tokens, confidence, entropy) over them."""
    n = masked.shape[0]
    # Greedy proposals: confidence is the top-1 probability, so p1 - p2 = p1 (1 - p2 / p1).
    top2 = torch.topk(logits.float(), 2, dim=-1).values
    margin = confidence.float() * (1 - (top2[:, 1] - top2[:, 0]).exp())
    settled = torch.ones(n, dtype=torch.bool, device=masked.device)
    settled[1:] = ~masked[:-1]
    m = masked.float()
    count = m.sum()
    masked_left = (torch.cumsum(m, 0) - m) / count.clamp_min(1.0)
    is_stop = (torch.isin(tokens, stop_ids) if stop_ids is not None and stop_ids.numel()
               else torch.zeros(n, dtype=torch.bool, device=masked.device))
    columns = [confidence.float(), margin, entropy.float(), settled.float(), masked_left,
               torch.log1p(count).expand(n), is_stop.float(),
               torch.full((n,), float(fresh), device=masked.device)]
    return torch.stack(columns, dim=-1)


@dataclass
class CommitPolicy:
    """Standardized features through linear layers (tanh between them), then a sigmoid."""

    mean: Tensor  # [F]
    std: Tensor  # [F]
    layers: list[tuple[Tensor, Tensor]]  # (weight [out, in], bias [out]); the last has out=1

    def probability(self, features: Tensor) -> Tensor:
        """Probability [n] that each position's proposal is final, from features [n, F]."""
        x = (features.float() - self.mean.to(features.device)) / self.std.to(features.device)
        for i, (weight, bias) in enumerate(self.layers):
            x = x @ weight.to(features.device).T + bias.to(features.device)
            if i < len(self.layers) - 1:
                x = torch.tanh(x)
        return torch.sigmoid(x.squeeze(-1))

    def to_json(self, **meta: Any) -> dict[str, Any]:
        return {"features": list(FEATURES), "mean": self.mean.tolist(), "std": self.std.tolist(),
                "layers": [{"weight": w.tolist(), "bias": b.tolist()} for w, b in self.layers],
                **meta}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> CommitPolicy:
        if tuple(data.get("features", ())) != FEATURES:
            raise ValueError(f"commit policy features {data.get('features')} are not "
                             f"{list(FEATURES)}: train it again")
        layers = [(torch.tensor(layer["weight"], dtype=torch.float32),
                   torch.tensor(layer["bias"], dtype=torch.float32)) for layer in data["layers"]]
        std = torch.tensor(data["std"], dtype=torch.float32)
        if any(not math.isfinite(s) or s <= 0 for s in std.tolist()):
            raise ValueError("commit policy: std must be positive")
        return cls(torch.tensor(data["mean"], dtype=torch.float32), std, layers)


@cache
def load_policy(path: str | None = None) -> CommitPolicy:
    """The commit policy in `path` (None: the shipped one, `POLICY_FILE`), read once."""
    file = Path(path) if path is not None else POLICY_FILE
    return CommitPolicy.from_json(json.loads(file.read_text(encoding="utf-8")))
