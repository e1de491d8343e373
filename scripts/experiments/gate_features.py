"""Which inputs and which label the confidence gate's calibrator is fitted with (docs/usage.md,
"Confidence gate"): 5-fold cross-validation on the training cursors' suggestions only.

    python -m dg_lsp.measure.gate_fit collect --out runs/gate/train.jsonl    # 2400 cursors, seed 1
    python scripts/experiments/gate_features.py runs/gate/train.jsonl

For each label (exact match; edit similarity >= 0.7, the shipped one) and each feature set
(the shipped six of dg_lsp.document.gate.FEATURES; with what precedes the cursor on its line,
passes
per token, a brackets hole and whether the engine stopped at the unit's end; the Score's four
fields alone; `lowest` alone), it prints the cross-validated log loss (the penalty chosen
from dg_lsp.measure.gate_fit.PENALTIES), AUC, and the exact match and edit similarity of the
suggestions ranked in the top third of the cursors by the out-of-fold probability, beside
`lowest` and `mean` ranking alone. No held-out cursor is read.
"""

from __future__ import annotations

import math
import re
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from dg_lsp.measure import gate_fit  # noqa: E402
from dg_lsp.measure.bench_gate import Shown  # noqa: E402

AFTER = ("line start", "=", "(", ".", ",", ":", "keyword")
_KEYWORD = re.compile(r"(?:^|[^\w.])(?:return|if|elif|while|for|in|not|and|or|import|from|"
                      r"raise|yield|with|assert|lambda|await|del|as|is|else)$")


def after(line_prefix: str) -> str:
    """What precedes the cursor on its line: one of AFTER, or "other"."""
    text = line_prefix.rstrip()
    if not text:
        return "line start"
    if _KEYWORD.search(text) and len(text) < len(line_prefix):
        return "keyword"
    last = text[-1]
    if last in "([{":
        return "("
    return last if last in "=.,:" else "other"


def extended(row: Shown) -> dict[str, float]:
    """Every candidate input, by name."""
    s = row.score()
    assert s is not None
    where = after(row.line_prefix)
    return {"lowest": s.lowest, "mean": s.mean, "log_tokens": math.log1p(s.tokens),
            "block": float(row.hole == "block"), "log_chars": math.log1p(len(row.text)),
            "lines": float(row.text.count("\n")), "repeated": float(row.repeated),
            "passes_per_token": s.passes / max(1, s.tokens),
            "brackets": float(row.hole == "brackets"),
            "unit": float(row.finish_reason == "unit"),
            **{f"after {a}": float(where == a) for a in AFTER}}


SHIPPED = ["lowest", "mean", "log_tokens", "block", "log_chars", "lines", "repeated"]
SETS = {
    "shipped (7)": SHIPPED,
    "without repeated (6)": SHIPPED[:-1],
    "+ passes/token, brackets, unit end (10)": SHIPPED + ["passes_per_token", "brackets", "unit"],
    "+ what precedes the cursor (14)": SHIPPED + [f"after {a}" for a in AFTER],
    "all (17)": SHIPPED + ["passes_per_token", "brackets", "unit"]
                + [f"after {a}" for a in AFTER],
    "Score fields only (lowest, mean, tokens, passes/token)": ["lowest", "mean", "log_tokens",
                                                               "passes_per_token"],
    "lowest alone": ["lowest"],
}


def top_third(score: np.ndarray, exact: np.ndarray, sim: np.ndarray, cursors: int
              ) -> tuple[float, float]:
    top = np.argsort(-score, kind="stable")[: math.ceil(cursors / 3)]
    return float(exact[top].mean()), float(sim[top].mean())


def main(path: str) -> None:
    rows = [Shown(**r) for r in gate_fit.load_rows(Path(path))]
    shown = [r for r in rows if r.lowest is not None]
    table = [extended(r) for r in shown]
    ids = [r.id for r in shown]
    exact = np.array([float(r.exact) for r in shown])
    sim = np.array([r.similarity for r in shown])
    print(f"{len(rows)} cursors, {len(shown)} suggestions, {int(exact.sum())} exact, "
          f"{int((sim >= gate_fit.SIMILAR).sum())} with edit similarity >= {gate_fit.SIMILAR}")
    print("| label | inputs | penalty | CV log loss | CV AUC | top third: exact | edit sim |")
    print("|---|---|---|---|---|---|---|")
    for label, y in (("exact", exact), (f"similarity >= {gate_fit.SIMILAR}",
                                        (sim >= gate_fit.SIMILAR).astype(float))):
        for name, names in SETS.items():
            x = np.array([[t[n] for n in names] for t in table])
            losses = {lam: gate_fit.log_loss(gate_fit.out_of_fold(x, y, ids, lam), y)
                      for lam in gate_fit.PENALTIES}
            lam = min(gate_fit.PENALTIES, key=lambda k: (round(losses[k], 6), -k))
            p = gate_fit.out_of_fold(x, y, ids, lam)
            em, es = top_third(p, exact, sim, len(rows))
            print(f"| {label} | {name} | {lam} | {losses[lam]:.4f} | {gate_fit.auc(p, y):.3f} "
                  f"| {em:.3f} | {es:.3f} |")
    for name in ("lowest", "mean"):
        em, es = top_third(np.array([t[name] for t in table]), exact, sim, len(rows))
        print(f"| - | `{name}` alone, unfitted | - | - | - | {em:.3f} | {es:.3f} |")


if __name__ == "__main__":
    main(sys.argv[1])
