"""The Neovim plugin's :DgFillHoles in real Neovims (the wheel's and the system's, where
present): the cursors of a visual block, then a list of marks, each completed with its own text
from one `dg-lsp/fillHoles` request and applied in one edit. The server's engine writes given
texts (tests/support/scripted.py), so the buffer's lines are exact.

Then the real server with the bundled model, in Neovim 0.11 (the wheel's): :DgFillHoles on a
visual block's cursors, and "Fill every hole in this function" picked through
vim.lsp.buf.code_action; each buffer must hold what the same code computes in this process
(tests/support/holes_scenes.py). Skipped, with the reason, where a Neovim (or the bundled
model) is missing."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.support.holes_scenes import (
    POINT,
    POINT_CURSORS,
    READ_LINES,
    READ_LINES_CURSOR,
    cursors_filled,
    function_filled,
)
from tests.support.nvim_harness import (
    BUNDLED,
    CAPTURE_LUA,
    NEOVIMS,
    PLUGIN,
    nvim_env,
    nvim_or_skip,
    run_headless,
)

pytestmark = pytest.mark.e2e  # real Neovims

SOURCE = ("def pair(x, y):\n    a = \n    b = \n    return a, b\n\n\n"
          "def other(x, y):\n    c = \n    d = \n    return c, d\n")
HOLES_SERVER = """
import json, sys
from dg_lsp.lsp.server import create_server
from tests.support.scripted import Scripted, holes
create_server(Scripted(*[holes(*fills) for fills in json.loads(sys.argv[1])])).start_io()
"""
ANSWERS = [["x + 1", "y * 2"], ["x - 1", ""]]

LUA = CAPTURE_LUA + """
local function finish()
  local f = io.open(vim.env.DG_OUT, "w")
  f:write(vim.fn.json_encode(out))
  f:close()
end
local done = 0
vim.api.nvim_create_autocmd("User", { pattern = "DgFillHolesDone",
                                      callback = function() done = done + 1 end })
vim.cmd("filetype on")
local dg = require("dg_lsp")
dg.setup({ cmd = vim.fn.json_decode(vim.env.DG_CMD) })
vim.cmd("edit " .. vim.env.DG_FILE)
local buf = vim.api.nvim_get_current_buf()
out.initialized = vim.wait(120000, function()
  local client = dg.client(buf)
  return client ~= nil and client.initialized == true
end, 50)

-- a visual block down lines 2-3, its right edge after "= "
vim.api.nvim_win_set_cursor(0, { 2, 7 })
vim.cmd([[execute "normal! \\<C-v>j\\<Esc>"]])
vim.cmd("'<,'>DgFillHoles")
out.block_done = vim.wait(60000, function() return done == 1 end, 50)
out.block = vim.api.nvim_buf_get_lines(buf, 0, -1, false)

-- marks on lines 8 and 9, at their ends
vim.api.nvim_buf_set_mark(buf, "a", 8, 8, {})
vim.api.nvim_buf_set_mark(buf, "b", 9, 8, {})
vim.cmd("DgFillHoles a b")
out.marks_done = vim.wait(60000, function() return done == 2 end, 50)
out.marks = vim.api.nvim_buf_get_lines(buf, 0, -1, false)
vim.cmd("DgFillHoles z")
finish()
vim.cmd("qa!")
"""


@pytest.fixture(scope="module", params=list(NEOVIMS))
def run(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
        ) -> dict[str, Any]:
    nvim = nvim_or_skip(request.param)
    tmp = tmp_path_factory.mktemp("nvim-holes")
    source = tmp / "pair.py"
    source.write_text(SOURCE)
    script = tmp / "holes.lua"
    script.write_text(LUA)
    out = tmp / "out.json"
    server = [sys.executable, "-c", HOLES_SERVER, json.dumps(ANSWERS), "serve"]
    env = nvim_env(tmp, Path("unused"), source, out, 0, 0, XDG_RUNTIME_DIR=str(tmp),
                   DG_CMD=json.dumps(server))
    command = [nvim, "--headless", "-u", "NONE", "--cmd", f"set runtimepath^={PLUGIN}",
               "-c", f"luafile {script}"]
    return run_headless(command, env, tmp, out, timeout=300)


def test_each_cursor_of_a_visual_block_gets_its_own_text(run: dict[str, Any]):
    assert run["initialized"] is True
    assert run["block_done"] is True, run["notes"]
    assert run["block"] == SOURCE.replace("a = \n", "a = x + 1\n").replace(
        "b = \n", "b = y * 2\n").split("\n")[:-1]


def test_marks_are_cursors_too_and_one_with_nothing_usable_stays_as_it_was(run: dict[str, Any]):
    assert run["marks_done"] is True, run["notes"]
    assert run["marks"] == SOURCE.replace("a = \n", "a = x + 1\n").replace(
        "b = \n", "b = y * 2\n").replace("c = \n", "c = x - 1\n").split("\n")[:-1]
    assert run["notes"] == ["dg-lsp: mark z is not set in this buffer"]


# The real server: a visual block down point.py's `self.… = ` lines, then the fill action on
# read_lines.py, each awaited until the buffer changed (or the time is up).
REAL_LUA = CAPTURE_LUA + """
local function lines_of(buf) return vim.api.nvim_buf_get_lines(buf, 0, -1, false) end
local function attached(buf)
  local client = require("dg_lsp").client(buf)
  return client ~= nil and client.initialized == true
end
local done = false
vim.api.nvim_create_autocmd("User", { pattern = "DgFillHolesDone",
                                      callback = function() done = true end })
vim.cmd("filetype on")
vim.o.hidden = true
require("dg_lsp").setup({ cmd = vim.fn.json_decode(vim.env.DG_CMD) })

vim.cmd("edit " .. vim.env.DG_FILE)
local point = vim.api.nvim_get_current_buf()
out.initialized = vim.wait(120000, function() return attached(point) end, 50)
vim.api.nvim_win_set_cursor(0, { tonumber(vim.env.DG_LINE), tonumber(vim.env.DG_CHAR) })
vim.cmd([[execute "normal! \\<C-v>j\\<Esc>"]])
vim.cmd("'<,'>DgFillHoles")
out.block_done = vim.wait(300000, function() return done end, 50)
out.block = lines_of(point)

vim.cmd("edit " .. vim.env.DG_HOLES_FILE)
local holes = vim.api.nvim_get_current_buf()
out.holes_attached = vim.wait(60000, function() return attached(holes) end, 50)
local tick = vim.api.nvim_buf_get_changedtick(holes)
vim.api.nvim_win_set_cursor(0, { tonumber(vim.env.DG_HOLES_LINE), tonumber(vim.env.DG_HOLES_CHAR) })
vim.lsp.buf.code_action({
  apply = true,
  filter = function(action) return action.title == "Fill every hole in this function" end,
})
out.fill_done = vim.wait(300000, function()
  return vim.api.nvim_buf_get_changedtick(holes) ~= tick
end, 50)
out.filled = lines_of(holes)
local f = io.open(vim.env.DG_OUT, "w")
f:write(vim.fn.json_encode(out))
f:close()
vim.cmd("qa!")
"""


@pytest.fixture(scope="module")
def real_run(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """One Neovim 0.11 with the real server and the bundled model: both scenes."""
    nvim = nvim_or_skip("wheel")
    if not (BUNDLED / "config.json").exists():
        pytest.skip("the bundled model is not present")
    tmp = tmp_path_factory.mktemp("nvim-holes-real")
    point, holes = tmp / "point.py", tmp / "read_lines.py"
    point.write_text(POINT)
    holes.write_text(READ_LINES)
    script = tmp / "holes.lua"
    script.write_text(REAL_LUA)
    out = tmp / "out.json"
    (line, character), (holes_line, holes_char) = POINT_CURSORS[0], READ_LINES_CURSOR
    # the block's corner on the line's last character: `A` appends after it
    env = nvim_env(tmp, BUNDLED, point, out, line + 1, character - 1, XDG_RUNTIME_DIR=str(tmp),
                   OMP_NUM_THREADS="1", DG_HOLES_FILE=str(holes),
                   DG_HOLES_LINE=str(holes_line + 1), DG_HOLES_CHAR=str(holes_char))
    command = [nvim, "--headless", "-u", "NONE", "--cmd", f"set runtimepath^={PLUGIN}",
               "-c", f"luafile {script}"]
    return run_headless(command, env, tmp, out, timeout=600)


def test_a_visual_blocks_cursors_get_the_real_servers_texts(real_run: dict[str, Any],
                                                             bundled_engine):
    assert real_run["initialized"] is True
    assert real_run["block_done"] is True, real_run["notes"]
    expected = cursors_filled(bundled_engine, POINT, POINT_CURSORS)
    assert expected != POINT  # the model wrote something at the cursors
    assert real_run["block"] == expected.split("\n")[:-1], real_run["notes"]


def test_the_fill_action_picked_from_code_action_is_the_real_servers(real_run: dict[str, Any],
                                                                     bundled_engine):
    assert real_run["holes_attached"] is True
    assert real_run["fill_done"] is True, real_run["notes"]
    expected = function_filled(bundled_engine, READ_LINES, READ_LINES_CURSOR)
    assert "..." not in expected and "TODO" not in expected
    assert real_run["filled"] == expected.split("\n")[:-1], real_run["notes"]
