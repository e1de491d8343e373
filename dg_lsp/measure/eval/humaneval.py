"""HumanEval-Infilling (Bavarian et al. 2022) rows as infill cases.

The data is not shipped: it is read from `$DG_EVAL_DATA`, or from
`../shared/eval/human-eval-infilling` next to the repository. Each row is `task_id, entry_point,
prompt, suffix, canonical_solution, test`; the prompt is the prefix, the canonical solution the
middle.
"""

from __future__ import annotations

import gzip
import json
import os
import random
from pathlib import Path

from engine.data.cases import Case

# suite name -> (file, hole kind)
SUITES = {
    "humaneval-single": ("HumanEval-SingleLineInfilling.jsonl.gz", "single-line"),
    "humaneval-multi": ("HumanEval-MultiLineInfilling.jsonl.gz", "multi-line"),
    "humaneval-span": ("HumanEval-RandomSpanInfilling.jsonl.gz", "random-span"),
}


def default_data_dir() -> Path:
    if os.environ.get("DG_EVAL_DATA"):
        return Path(os.environ["DG_EVAL_DATA"])
    repo = Path(__file__).resolve().parents[3]
    return repo.parent / "shared" / "eval" / "human-eval-infilling"


def load_suite(
    suite: str, data_dir: Path | None = None, limit: int | None = None, seed: int = 0
) -> list[Case]:
    """The rows of `suite` as cases; with `limit`, a sample of that many chosen by `seed`."""
    if suite not in SUITES:
        raise ValueError(f"unknown suite {suite!r} (known: {', '.join(SUITES)})")
    filename, kind = SUITES[suite]
    path = (data_dir or default_data_dir()) / filename
    if not path.is_file():
        raise FileNotFoundError(
            f"{path} not found: point $DG_EVAL_DATA or --data-dir at the human-eval-infilling data"
        )
    with gzip.open(path, "rt", encoding="utf-8") as lines:
        rows = [json.loads(line) for line in lines if line.strip()]
    if limit is not None and limit < len(rows):
        # A seeded sample rather than the first rows, which all come from the first few problems.
        chosen = sorted(random.Random(seed).sample(range(len(rows)), limit))
        rows = [rows[i] for i in chosen]
    return [
        Case(
            id=row["task_id"],
            kind=kind,
            prefix=row["prompt"],
            middle=row["canonical_solution"],
            suffix=row["suffix"],
            test=row["test"],
            entry_point=row["entry_point"],
        )
        for row in rows
    ]
