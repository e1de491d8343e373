"""A command that fails prints one line naming the cause and exits non-zero: no traceback."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from engine.cli import run_command
from engine.models.config import CheckpointError
from tests.support.tiny_checkpoints import write_dream_checkpoint


@pytest.fixture(scope="module")
def broken_ckpt(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = write_dream_checkpoint(tmp_path_factory.mktemp("broken"))
    config = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**config, "num_attention_heads": 0}))
    return folder


@pytest.mark.parametrize("command", [
    ["complete", "{file}:1:5"],
    ["rewrite", "{file}", "--range", "1:1-1:6"],
])
def test_a_checkpoint_that_cannot_load_is_one_line(tmp_path: Path, broken_ckpt: Path, command):
    source = tmp_path / "t.py"
    source.write_text("x = 1\n")
    argv = [a.format(file=source) for a in command] + ["--model", str(broken_ckpt),
                                                       "--device", "cpu"]
    done = subprocess.run([sys.executable, "-m", "dg_lsp.cli", *argv], capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 2
    assert done.stderr == (f"dg-lsp: cannot load the model: {broken_ckpt / 'config.json'}: "
                           "num_attention_heads must be an integer in 1..1024, got 0\n")
    assert done.stdout == ""


def test_unexpected_errors_are_one_line_too(capsys):
    def checkpoint() -> int:
        raise CheckpointError("/m/config.json: config key 'vocab_size' is missing")

    def bug() -> int:
        raise ZeroDivisionError("division by zero")

    assert run_command("dg-engine", checkpoint) == 2
    assert run_command("dg-engine", bug) == 1
    assert capsys.readouterr().err == (
        "dg-engine: cannot load the model: /m/config.json: config key 'vocab_size' is missing\n"
        "dg-engine: internal error: ZeroDivisionError: division by zero\n")
