"""Fit the confidence gate's calibrator (dg_lsp.document.gate.Calibrator) from the bundled
model's own
completions on training-corpus cursors.

    python -m dg_lsp.measure.gate_fit collect --out runs/gate/train.jsonl   # 2400 cursors, seed 1
    python -m dg_lsp.measure.gate_fit fit --rows runs/gate/train.jsonl
    # -> dg_lsp/document/gate_calibrator.json

`collect` cuts cursors with `engine.data.cases.cut_cursor_cases` (the bench's 8 cursor classes)
from the files of this interpreter's standard library that the corpus builder trains on
(`engine.train.corpus`: its skip rules, FORBIDDEN and the "train" split; never a file it holds
out, the held-out bench packages or evaluation data), runs each through the default path with
the gate off (dg_lsp.measure.bench_gate.run_cursors: what the server would show, its Score and what
the server knows when it decides) and writes one JSON line per cursor.

`fit` fits a logistic regression (Newton's method, an L2 penalty on the standardized weights
chosen by 5-fold cross-validated log loss from a small grid; deterministic) predicting that
the suggestion is right from `dg_lsp.document.gate.features`, on the cursors that got a
suggestion,
and writes the JSON dg_lsp.document.gate.calibrator reads. Right is `--label similar` (the
default):
the suggestion, cut to as many lines as what was written there, is at least SIMILAR in edit
similarity to it (exact matches are too few of the training suggestions to fit on, docs/usage.md;
this label holds them and the near misses a user would accept and touch up, and on
cross-validation it ranks exact matches as well as `--label exact` does and edit similarity
better); `--label exact`: the bench's exact match.
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import json
import sys
import sysconfig
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from dg_lsp.document.gate import CALIBRATOR_FILE, FEATURES, Calibrator
from engine.bounds import CASES_RANGE, SEED_RANGE, bounded_argument
from engine.options import add_model_options

PENALTIES = (0.1, 1.0, 3.0, 10.0, 30.0)
FOLDS = 5
SIMILAR = 0.7  # --label similar: edit similarity at least this


def training_folder(out: Path) -> Path:
    """`out`, filled with links to the standard library files the corpus trains on."""
    from engine.train.corpus import BENCHMARK_PACKAGES, FORBIDDEN, iter_source_files, split_of

    stdlib = Path(sysconfig.get_paths()["stdlib"])
    for path, rel in iter_source_files([stdlib]):
        if split_of(rel) != "train":
            continue
        assert not FORBIDDEN.search(str(path))
        assert not any(p in path.parts for p in BENCHMARK_PACKAGES)
        link = out / rel
        link.parent.mkdir(parents=True, exist_ok=True)
        link.symlink_to(path)
    return out


def collect(out: Path, count: int, seed: int, model: str | None, device: str) -> int:
    from dg_lsp.measure.bench_gate import run_cursors
    from engine.data.cases import cut_cursor_cases

    out.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as folder, out.open("w", encoding="utf-8") as lines:
        cases = cut_cursor_cases(training_folder(Path(folder)), count, seed=seed)

        def write(row: Any) -> None:
            lines.write(json.dumps(dataclasses.asdict(row)) + "\n")
            lines.flush()

        rows = run_cursors(cases, model, device, on_row=write)
    shown = [r for r in rows if r.lowest is not None]
    print(f"{len(rows)} cursors, {len(shown)} with a suggestion, "
          f"{sum(r.exact for r in shown)} exactly right -> {out}")
    return 0


# -- the fit ----------------------------------------------------------------------------------


def load_rows(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line]


def design(rows: list[dict[str, Any]], label: str) -> tuple[np.ndarray, np.ndarray, list[str]]:
    """Features and labels of the rows with a suggestion (what the gate decides on)."""
    from dg_lsp.measure.bench_gate import Shown

    xs, ys, ids = [], [], []
    for row in rows:
        shown = Shown(**row)
        x = shown.features()
        if x is None:
            continue
        xs.append(x)
        ys.append(float(shown.exact if label == "exact" else shown.similarity >= SIMILAR))
        ids.append(shown.id)
    return np.array(xs, dtype=np.float64), np.array(ys, dtype=np.float64), ids


def logistic(x: np.ndarray, y: np.ndarray, penalty: float, iterations: int = 50
             ) -> np.ndarray:
    """Weights [bias, w...] of an L2-penalized (not the bias) logistic regression, by Newton."""
    a = np.hstack([np.ones((len(x), 1)), x])
    w = np.zeros(a.shape[1])
    ridge = np.full(a.shape[1], penalty)
    ridge[0] = 0.0
    for _ in range(iterations):
        p = 1 / (1 + np.exp(-(a @ w)))
        gradient = a.T @ (p - y) + ridge * w
        hessian = (a * (p * (1 - p))[:, None]).T @ a + np.diag(ridge) + 1e-9 * np.eye(len(w))
        step = np.linalg.solve(hessian, gradient)
        w -= step
        if np.abs(step).max() < 1e-10:
            break
    return w


def log_loss(p: np.ndarray, y: np.ndarray) -> float:
    p = np.clip(p, 1e-9, 1 - 1e-9)
    return float(-np.mean(y * np.log(p) + (1 - y) * np.log(1 - p)))


def auc(score: np.ndarray, y: np.ndarray) -> float:
    """The chance a right suggestion scores above a wrong one (ties count half)."""
    right, wrong = score[y == 1], score[y == 0]
    if not len(right) or not len(wrong):
        return float("nan")
    above = (right[:, None] > wrong[None, :]).sum() + 0.5 * (right[:, None] == wrong[None, :]).sum()
    return float(above / (len(right) * len(wrong)))


def standardize(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    mean = x.mean(axis=0)
    std = x.std(axis=0)
    return mean, np.where(std > 1e-12, std, 1.0)


def fold_of(case_id: str) -> int:
    return int(hashlib.sha1(case_id.encode()).hexdigest(), 16) % FOLDS


def out_of_fold(x: np.ndarray, y: np.ndarray, ids: list[str], penalty: float) -> np.ndarray:
    """Each row's probability from the model fitted on the other folds."""
    folds = np.array([fold_of(i) for i in ids])
    p = np.zeros(len(y))
    for k in range(FOLDS):
        test = folds == k
        if not test.any():
            continue
        mean, std = standardize(x[~test])
        w = logistic((x[~test] - mean) / std, y[~test], penalty)
        p[test] = 1 / (1 + np.exp(-(w[0] + ((x[test] - mean) / std) @ w[1:])))
    return p


def fit(rows: list[dict[str, Any]], label: str = "similar",
        report: Callable[[str], None] = print) -> tuple[Calibrator, dict[str, Any]]:
    x, y, ids = design(rows, label)
    if not 0 < y.sum() < len(y):
        raise ValueError(f"{len(y)} suggestions, {int(y.sum())} right: nothing to fit")
    losses = {lam: log_loss(out_of_fold(x, y, ids, lam), y) for lam in PENALTIES}
    penalty = min(PENALTIES, key=lambda lam: (round(losses[lam], 6), -lam))
    held = out_of_fold(x, y, ids, penalty)
    mean, std = standardize(x)
    w = logistic((x - mean) / std, y, penalty)
    model = Calibrator(tuple(map(float, mean)), tuple(map(float, std)), tuple(map(float, w[1:])),
                       float(w[0]))
    p = np.array([model.probability(list(v)) for v in x])
    meta = {"label": label, "penalty": penalty, "suggestions": len(y),
            "positive_share": round(float(y.mean()), 4),
            "cv_log_loss": {str(k): round(v, 4) for k, v in losses.items()},
            "cv_auc": round(auc(held, y), 4),
            "cv_auc_lowest": round(auc(x[:, FEATURES.index("lowest")], y), 4),
            "train_log_loss": round(log_loss(p, y), 4)}
    report(f"{len(y)} suggestions, {int(y.sum())} right ({label}); penalty {penalty}; "
           f"cross-validated AUC {meta['cv_auc']} (lowest alone: {meta['cv_auc_lowest']})")
    for name, weight in zip(FEATURES, model.weight, strict=True):
        report(f"  {name:18s} {weight:+.3f}")
    return model, meta


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m dg_lsp.measure.gate_fit", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    c = sub.add_parser("collect", help="the default path's suggestions on training cursors")
    c.add_argument("--out", type=Path, required=True)
    c.add_argument("--count", type=bounded_argument(CASES_RANGE), default=2400)
    c.add_argument("--seed", type=bounded_argument(SEED_RANGE), default=1)
    add_model_options(c, default="cpu", dtype=False)
    f = sub.add_parser("fit", help="fit the calibrator, write its JSON")
    f.add_argument("--rows", type=Path, action="append", required=True,
                   help="collect's output (repeatable)")
    f.add_argument("--label", choices=("similar", "exact"), default="similar",
                   help=f"right: edit similarity at least {SIMILAR} (default), or exact")
    f.add_argument("--out", type=Path, default=CALIBRATOR_FILE)
    args = parser.parse_args(argv)
    if args.command == "collect":
        return collect(args.out, args.count, args.seed, args.model, args.device)
    rows = [row for path in args.rows for row in load_rows(path)]
    model, meta = fit(rows, args.label)
    data = model.to_json(trained_on="bundled model, default path settings, the suggestions at "
                         "cursors cut with engine.data.cases.cut_cursor_cases from the standard "
                         f"library files (Python {sys.version.split()[0]}) the corpus trains "
                         "on", refit="python -m dg_lsp.measure.gate_fit collect --out "
                         "runs/gate/train.jsonl --count 2400 --seed 1; python -m "
                         "dg_lsp.measure.gate_fit fit --rows runs/gate/train.jsonl", **meta)
    args.out.write_text(json.dumps(data, indent=1) + "\n", encoding="utf-8")
    print(f"-> {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
