"""`dg-engine bench --section dtypes`: the model at each dtype side by side, each loaded in its
own process; a dtype the engine refuses gets its reason in its row. The figures themselves are
measurements: this checks what each row holds, not its speed."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from engine.cli import main


def test_each_dtype_gets_a_row_and_a_refused_one_its_reason(
    dream_ckpt: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = main(["bench", "--section", "dtypes", "--model", str(dream_ckpt), "--device", "cpu",
                 "--dtypes", "float32,int4,int3", "--requests", "1", "--max-tokens", "4",
                 "--passes", "1", "--threads", "1", "--json"])
    report = json.loads(capsys.readouterr().out)
    assert code == 1  # one dtype failed
    float32, int4, int3 = report["dtypes"]
    assert (float32["dtype"], int4["dtype"], int3["dtype"]) == ("float32", "int4", "int3")
    assert "int3" in int3["error"] and "passMs" not in int3
    for row in (float32, int4):
        assert row["passMs"] > 0 and row["completionP50Ms"] > 0
        assert 1 <= row["passesPerCompletion"] <= 4  # a 4-token hole
        assert row["peakRssMb"] >= row["baseRssMb"] > 0
    # Every linear layer of the Dream layout is int4 but the float embedding stays.
    assert int4["weightsMb"] < float32["weightsMb"]
