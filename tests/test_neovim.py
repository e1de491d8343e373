"""A real client nobody here wrote: headless Neovim's built-in LSP client drives `dg-lsp`.

Neovim 0.7 (Debian's package) starts the server with `vim.lsp.start_client`, opens a Python
file and asks for `textDocument/completion`; the item it receives must carry exactly the edit
the same pipeline computes in this process. Skipped, with the reason, where `nvim` is missing.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from dg_lsp.languages import language_for
from dg_lsp.pipeline import CompletionRequest, Pipeline
from dg_lsp.settings import parse_settings

ROOT = Path(__file__).resolve().parent.parent
BUNDLED = ROOT / "engine" / "bundled" / "default"
SOURCE = "def add(a, b):\n    return a + b\n\n\nprint(add(1, \n"
LINE, CHARACTER = 4, 13  # after "print(add(1, "
OPTIONS = {"holeSize": {"brackets": 8, "restOfLine": 8}}

LUA = """
local client_id = vim.lsp.start_client({
  name = "dg_lsp", cmd = vim.fn.json_decode(vim.env.DG_CMD), root_dir = vim.env.DG_ROOT,
  init_options = vim.fn.json_decode(vim.env.DG_OPTIONS),
})
vim.cmd("edit " .. vim.env.DG_FILE)
local buf = vim.api.nvim_get_current_buf()
vim.lsp.buf_attach_client(buf, client_id)
vim.wait(120000, function()
  local c = vim.lsp.get_client_by_id(client_id)
  return c ~= nil and c.initialized
end, 50)
local params = {
  textDocument = { uri = vim.uri_from_bufnr(buf) },
  position = { line = tonumber(vim.env.DG_LINE), character = tonumber(vim.env.DG_CHAR) },
}
local responses = vim.lsp.buf_request_sync(buf, "textDocument/completion", params, 400000)
local out = io.open(vim.env.DG_OUT, "w")
out:write(vim.fn.json_encode(responses or {}))
out:close()
vim.lsp.stop_client(client_id)
vim.cmd("qa!")
"""


@pytest.fixture
def model(request: pytest.FixtureRequest) -> Path:
    if (BUNDLED / "config.json").exists():
        return BUNDLED
    return request.getfixturevalue("dream_ckpt")


def test_neovim_gets_the_pipelines_completion(tmp_path: Path, model: Path):
    nvim = shutil.which("nvim")
    if nvim is None:
        print("SKIP reason: nvim is not installed (apt-get install neovim)")
        pytest.skip("nvim is not installed (apt-get install neovim)")
    source = tmp_path / "example.py"
    source.write_text(SOURCE)
    script = tmp_path / "client.lua"
    script.write_text(LUA)
    out = tmp_path / "responses.json"
    env = {
        "PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "PYTHONPATH": str(ROOT),
        "DG_CMD": json.dumps([sys.executable, "-m", "dg_lsp.cli", "serve", "--engine",
                              "inproc", "--model", str(model), "--device", "cpu"]),
        "DG_ROOT": str(tmp_path), "DG_FILE": str(source), "DG_OUT": str(out),
        "DG_LINE": str(LINE), "DG_CHAR": str(CHARACTER), "DG_OPTIONS": json.dumps(OPTIONS),
    }
    subprocess.run([nvim, "--headless", "-u", "NONE", "-c", f"luafile {script}"], env=env,
                   cwd=tmp_path, timeout=500, check=True, capture_output=True)
    responses = json.loads(out.read_text())
    (response,) = [r for r in (responses.values() if isinstance(responses, dict)
                               else responses) if r]
    assert "error" not in response, response
    items = response["result"]["items"]

    from engine import Engine

    settings, errors = parse_settings(OPTIONS)
    assert errors == []
    offset = len("".join(SOURCE.splitlines(keepends=True)[:LINE])) + CHARACTER
    expected = Pipeline(Engine.load(str(model), device="cpu"), settings).complete(
        CompletionRequest(SOURCE, offset, language_for("python"), source.as_uri()))
    if expected is None:
        assert items == []
    else:
        (item,) = items
        assert item["textEdit"]["newText"] == expected.text
        assert item["textEdit"]["range"]["start"] == {"line": LINE, "character": CHARACTER}
