"""Train the learned sampler's commit policy (engine.decode.policy) from the model's own
trajectories.

    python -m engine.train.commit_policy collect --out runs/policy/trajectories.pt
    python -m engine.train.commit_policy train --trajectories runs/policy/trajectories.pt

`collect` runs the bundled model one token per pass (top-k, k=1, R=4 as editors run it) on
single-line holes cut from this repository's own sources (engine/ and dg_lsp/ at commit
`SOURCES_REV`, so later edits do not change them; never the held-out third-party package or
any evaluation data, which `engine.train.corpus.FORBIDDEN` names). At every step it records,
for every still-masked position of the masked range, the features
`engine.decode.policy.policy_features` computes, and the label: whether the position's current
proposal is the token the run finally commits there (stop tokens count as equal to each
other: the hole's end is padded after the first one). `--on-policy C` records the learned
sampler's own steps at cutoff C instead, labelled by the k=1 run's tokens.

`train` fits the classifier (logistic regression with --hidden 0, else one tanh layer) with
full-batch Adam on the CPU from a seed, holding out the last fifth of the holes, and writes
the JSON `engine.decode.policy.load_policy` reads.
"""

from __future__ import annotations

import argparse
import io
import json
import subprocess
import sys
import tarfile
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import torch
from torch import Tensor, nn

from engine.bounds import (
    CASES_RANGE,
    EPOCHS_RANGE,
    HIDDEN_UNITS_RANGE,
    SEED_RANGE,
    bounded_argument,
    bounds_of,
)
from engine.decode.policy import FEATURES, POLICY_FILE, CommitPolicy, policy_features
from engine.train.corpus import FORBIDDEN
from engine.types import InfillRequest, SamplerSettings

REPO = Path(__file__).resolve().parents[2]
SOURCES = ("engine", "dg_lsp")
# The commit whose sources the holes are cut from: the working tree changes with every commit,
# and the holes (so the trajectories and the policy) must not.
SOURCES_REV = "8b52a2dda36b0ede133f77b905f78fdd2cf5b77a"
HOLE_TOKENS = 32  # the eval's fixed single-line hole
HELD_OUT_SHARE = 0.2


@contextmanager
def recording(steps: list[dict[str, Tensor]]) -> Iterator[None]:
    """While active, every denoising step appends the features of its masked range's
    positions and their proposals to `steps` (engine.decode.denoise.STEP_OBSERVERS)."""
    from engine.decode.denoise import STEP_OBSERVERS
    from engine.decode.samplers import propose

    def observe(logits: Tensor, masked: Tensor, settings: SamplerSettings,
                stop_ids: Tensor, fresh: bool) -> None:
        tokens, confidence, entropy = propose(logits, settings.temperature)
        features = policy_features(logits, tokens, confidence, entropy, masked, stop_ids, fresh)
        steps.append({"features": features, "tokens": tokens, "masked": masked.clone()})

    STEP_OBSERVERS.append(observe)
    try:
        yield
    finally:
        STEP_OBSERVERS.remove(observe)


def collect(count: int, seed: int, cache_refresh: int = 4,
            on_policy: float | None = None, rev: str = SOURCES_REV) -> dict[str, Tensor]:
    """Features [N, F], labels [N] and hole index [N] of every masked position at every step
    of k=1 runs on `count` single-line holes from this repository's sources at commit `rev`.

    `on_policy`: record the steps of the learned sampler at this cutoff instead (the states
    the policy itself visits), still labelled by the k=1 run's tokens."""
    from engine import Engine
    from engine.data.cases import cut_cases

    cases = []
    archive = subprocess.run(["git", "-C", str(REPO), "archive", rev, *SOURCES],
                             check=True, capture_output=True).stdout
    with tempfile.TemporaryDirectory() as tmp:
        with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
            tar.extractall(tmp, filter="data")
        for i, folder in enumerate(SOURCES):
            share = count // len(SOURCES) + (1 if i < count % len(SOURCES) else 0)
            cut = cut_cases(Path(tmp) / folder, 2 * share, seed=seed, kinds=("single-line",))
            # Nothing whose path names evaluation data (dg_lsp/measure/eval/humaneval.py included).
            cases += [case for case in cut if not FORBIDDEN.search(case.id)][:share]
    engine = Engine.load(None)
    mask_id = engine.config.mask_token_id
    stops = torch.tensor(sorted(engine.decoder.stop_ids()))
    reference = SamplerSettings(sampler="topk", k=1, cache_refresh=cache_refresh, seed=seed)
    rollout = reference if on_policy is None else SamplerSettings(
        sampler="learned", cutoff=on_policy, cache_refresh=cache_refresh, seed=seed)
    rows: list[Tensor] = []
    labels: list[Tensor] = []
    holes: list[Tensor] = []
    for index, case in enumerate(cases):
        steps: list[dict[str, Tensor]] = []
        drafts = []
        with recording(steps):
            for draft in engine.infill_stream(InfillRequest(case.prefix, case.suffix,
                                                            HOLE_TOKENS, rollout)):
                drafts.append(draft)
        final = torch.tensor(drafts[-1].token_ids)
        if on_policy is not None:
            *_, last = engine.infill_stream(InfillRequest(case.prefix, case.suffix,
                                                          HOLE_TOKENS, reference))
            final = torch.tensor(last.token_ids)
        before = [[mask_id] * HOLE_TOKENS] + [d.token_ids for d in drafts[:-1]]
        for seen, recorded in zip(before, steps, strict=True):
            lo = next(i for i, t in enumerate(seen) if t == mask_id)
            masked = recorded["masked"]
            n = masked.shape[0]
            proposed, settled = recorded["tokens"][masked], final[lo : lo + n][masked]
            same = (proposed == settled) | (torch.isin(proposed, stops)
                                            & torch.isin(settled, stops))
            rows.append(recorded["features"][masked])
            labels.append(same.float())
            holes.append(torch.full((int(masked.sum()),), index))
        if (index + 1) % 50 == 0:
            print(f"{index + 1}/{len(cases)} holes", file=sys.stderr)
    return {"features": torch.cat(rows), "labels": torch.cat(labels),
            "holes": torch.cat(holes)}


def build(hidden: int) -> nn.Sequential:
    if hidden <= 0:
        return nn.Sequential(nn.Linear(len(FEATURES), 1))
    return nn.Sequential(nn.Linear(len(FEATURES), hidden), nn.Tanh(), nn.Linear(hidden, 1))


def fit(data: dict[str, Tensor], hidden: int = 4, seed: int = 0, epochs: int = 1500,
        lr: float = 0.03) -> tuple[CommitPolicy, dict[str, float]]:
    """The policy trained on the first holes, and its log loss and accuracy on the rest."""
    torch.manual_seed(seed)
    x, y, holes = data["features"].float(), data["labels"].float(), data["holes"]
    split = int(holes.max()) * (1 - HELD_OUT_SHARE) if holes.numel() else 0
    train, val = holes < split, holes >= split
    mean = x[train].mean(0)
    std = x[train].std(0).clamp_min(1e-3)
    z = (x - mean) / std
    net = build(hidden)
    opt = torch.optim.Adam(net.parameters(), lr=lr)
    loss_fn = nn.BCEWithLogitsLoss()
    for _ in range(epochs):
        opt.zero_grad()
        loss = loss_fn(net(z[train]).squeeze(-1), y[train])
        loss.backward()
        opt.step()
    linears = [m for m in net if isinstance(m, nn.Linear)]
    policy = CommitPolicy(mean, std, [(m.weight.detach().clone(), m.bias.detach().clone())
                                      for m in linears])
    report = {"train_positions": int(train.sum()), "val_positions": int(val.sum()),
              "positive_share": float(y.mean()) if y.numel() else 0.0}
    with torch.no_grad():
        for name, part in (("train", train), ("val", val)):
            if part.any():
                p = policy.probability(x[part]).clamp(1e-6, 1 - 1e-6)
                t = y[part]
                report[f"{name}_log_loss"] = float(-(t * p.log() + (1 - t) * (1 - p).log())
                                                   .mean())
                report[f"{name}_accuracy"] = float(((p >= 0.5).float() == t).float().mean())
    return policy, report


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m engine.train.commit_policy",
                                     description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    c = sub.add_parser("collect", help="k=1 trajectories of the bundled model on this repo")
    c.add_argument("--out", type=Path, required=True)
    seed = bounded_argument(SEED_RANGE)
    c.add_argument("--cases", type=bounded_argument(CASES_RANGE), default=400)
    c.add_argument("--seed", type=seed, default=0)
    c.add_argument("--rev", default=SOURCES_REV, help="commit to cut the holes from")
    c.add_argument("--on-policy", type=bounded_argument(bounds_of(SamplerSettings)["cutoff"]),
                   metavar="CUTOFF",
                   help="record the learned sampler's steps at this cutoff (labels: k=1's)")
    t = sub.add_parser("train", help="fit the classifier, write its JSON")
    t.add_argument("--trajectories", type=Path, nargs="+", required=True,
                   help="collected files; the same --cases and --seed share hole indices")
    t.add_argument("--out", type=Path, default=POLICY_FILE)
    t.add_argument("--hidden", type=bounded_argument(HIDDEN_UNITS_RANGE), default=4,
                   help="tanh units (0: logistic regression)")
    t.add_argument("--seed", type=seed, default=0)
    t.add_argument("--epochs", type=bounded_argument(EPOCHS_RANGE), default=1500)
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    if args.command == "collect":
        data = collect(args.cases, args.seed, on_policy=args.on_policy, rev=args.rev)
        args.out.parent.mkdir(parents=True, exist_ok=True)
        torch.save(data, args.out)
        print(f"{data['labels'].numel()} positions, {float(data['labels'].mean()):.3f} final")
        return 0
    # Weights only: a trajectories file is tensors, and unpickling anything else runs code.
    parts = [torch.load(path, weights_only=True) for path in args.trajectories]
    data = {key: torch.cat([part[key] for part in parts]) for key in parts[0]}
    policy, report = fit(data, args.hidden, args.seed, args.epochs)
    meta = {"hidden": args.hidden, "seed": args.seed, "epochs": args.epochs,
            "trained_on": "bundled model, top-k k=1, R=4, single-line holes from engine/ "
                          "and dg_lsp/", **report}
    args.out.write_text(json.dumps(policy.to_json(**meta), indent=1) + "\n", encoding="utf-8")
    print(json.dumps(report, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
