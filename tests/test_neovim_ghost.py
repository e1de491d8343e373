"""Ghost text in a real Neovim 0.11, typed into as a person would.

Headless Neovim (`nvim --headless --clean --listen SOCKET`, the plugin in editors/neovim on the
runtimepath, `dg-lsp serve --engine inproc` with the bundled model) gets its keys through
`nvim --server SOCKET --remote-send` (nvim_input, as if typed); `--remote-expr` reads the
buffer, the cursor and the ghost text's extmark. The suggestion drawn must be exactly the
completion the same pipeline computes in this process for the buffer as Neovim holds it, and
accepting it (whole, by word, by line) must put exactly that text in the buffer.

tmux: the same Neovim in a terminal; the screen captured with `tmux capture-pane -e` must show
the suggestion after the typed text, in another colour. With Pillow the capture is rendered to
docs/img/neovim-ghost-text.png (the picture the READMEs show).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from dg_lsp.languages import language_for
from dg_lsp.pipeline import CompletionRequest, Pipeline
from tests.test_neovim import BUNDLED, FIB, PLUGIN, ROOT, nvim_env, nvim_or_skip

FIB_TYPED = FIB.replace("    return\n", "    ret\n")  # "urn" is typed
FIB_ROW = 7  # 0-based: `    return`
STACK = "class Stack:\n    def __init__(self, config):\n        \n"
STACK_ROW = 2  # 0-based: the empty body line, 8 spaces
INSTRUCTION = "add type hints"
PICTURE = ROOT / "docs" / "img" / "neovim-ghost-text.png"

# Loaded into the Neovim under test: the plugin as a user sets it up, stubs for the prompt,
# and DgTest.state(), which the test reads through --remote-expr.
SETUP_LUA = """
vim.cmd("filetype plugin indent on")
local out = { prompts = {}, applied = {}, progress = {}, events = {}, notes = {} }
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
vim.api.nvim_create_autocmd("LspProgress", { callback = function(event)
  local value = event.data.params.value
  table.insert(out.progress, { kind = value.kind, title = value.title, message = value.message })
end })
for _, name in ipairs({ "DgGhostText", "DgGhostAccepted", "DgRewriteDone" }) do
  vim.api.nvim_create_autocmd("User", { pattern = name, callback = function()
    table.insert(out.events, name)
  end })
end

local dg = require("dg_lsp")
dg.setup({ cmd = vim.fn.json_decode(vim.env.DG_CMD) })
vim.cmd("edit " .. vim.env.DG_FILE)

local function text_of(chunks)
  local parts = {}
  for _, chunk in ipairs(chunks or {}) do table.insert(parts, chunk[1]) end
  return table.concat(parts)
end

DgTest = {}
function DgTest.state()
  local buf = vim.api.nvim_get_current_buf()
  local ghost = vim.NIL
  local marks = vim.api.nvim_buf_get_extmarks(buf, dg.ghost_namespace, 0, -1, { details = true })
  if marks[1] then
    local details = marks[1][4]
    local lines = {}
    for _, chunks in ipairs(details.virt_lines or {}) do table.insert(lines, text_of(chunks)) end
    ghost = { row = marks[1][2], col = marks[1][3], pos = details.virt_text_pos,
              hl = details.virt_text[1][2], text = text_of(details.virt_text), lines = lines }
  end
  local client = dg.client(buf)
  return vim.json.encode({
    mode = vim.api.nvim_get_mode().mode, name = vim.fn.expand("%:t"),
    lines = vim.api.nvim_buf_get_lines(buf, 0, -1, false),
    cursor = vim.api.nvim_win_get_cursor(0), ghost = ghost, marks = #marks,
    attached = client ~= nil and client.initialized == true, engine = dg.engine,
    notes = out.notes, prompts = out.prompts, applied = out.applied, progress = out.progress,
    events = out.events,
  })
end

-- The code action a user picks from vim.lsp.buf.code_action() on the visual selection.
function DgTest.rewrite_action()
  vim.lsp.buf.code_action({
    apply = true,
    filter = function(action) return action.title == "Rewrite selection with instruction…" end,
  })
end
"""


@pytest.fixture(scope="module")
def model(request: pytest.FixtureRequest) -> Path:
    if (BUNDLED / "config.json").exists():
        return BUNDLED
    return request.getfixturevalue("dream_ckpt")


class Neovim:
    """A Neovim listening on a socket; keys go in as typed, state comes out as JSON."""

    def __init__(self, nvim: str, socket: str, env: dict[str, str]) -> None:
        self.nvim, self.socket, self.env = nvim, socket, env

    def _remote(self, *args: str) -> str:
        done = subprocess.run([self.nvim, "--server", self.socket, *args], env=self.env,
                              stdin=subprocess.DEVNULL, capture_output=True, text=True,
                              timeout=30)
        assert done.returncode == 0, done.stderr
        return done.stdout

    def keys(self, keys: str) -> None:
        self._remote("--remote-send", keys)

    def expr(self, expression: str) -> str:
        return self._remote("--remote-expr", expression)

    def state(self) -> dict[str, Any]:
        return json.loads(self.expr("v:lua.DgTest.state()"))

    def wait(self, what: str, ready: Callable[[dict[str, Any]], bool],
             timeout: float = 60) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        while True:
            state = self.state()
            if ready(state):
                return state
            if time.monotonic() > deadline:
                raise TimeoutError(f"{what}: not within {timeout} s; last state {state}")
            time.sleep(0.05)


def start_neovim(nvim: str, tmp: Path, model: Path, source: Path, argv: list[str],
                 socket: str) -> tuple[subprocess.Popen[bytes], Neovim]:
    """Starts `argv` (a Neovim command, or tmux running one) with the plugin set up and
    `source` open; returns once the server is attached."""
    (tmp / "setup.lua").write_text(SETUP_LUA)
    env = nvim_env(tmp, model, source, tmp / "unused.json", 0, 0, OMP_NUM_THREADS="1",
                   XDG_RUNTIME_DIR=str(tmp), XDG_CONFIG_HOME=str(tmp / "config"),
                   XDG_STATE_HOME=str(tmp / "state"), XDG_DATA_HOME=str(tmp / "data"),
                   DG_INSTRUCTION=INSTRUCTION)
    # Its own process group: the end of the test kills Neovim and the server it started.
    proc = subprocess.Popen(argv, env=env, cwd=tmp, start_new_session=True,
                            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 30
    while not Path(socket).exists():
        assert proc.poll() is None and time.monotonic() < deadline, "Neovim did not start"
        time.sleep(0.05)
    neovim = Neovim(nvim, socket, env)
    neovim.wait("the server attached", lambda s: s["attached"], timeout=120)
    return proc, neovim


def nvim_command(nvim: str, socket: str, tmp: Path, headless: bool = True) -> list[str]:
    return [nvim, *(["--headless"] if headless else []), "--clean", "--listen", socket,
            "--cmd", f"set runtimepath^={PLUGIN}", "-c", f"luafile {tmp / 'setup.lua'}"]


def stop(proc: subprocess.Popen[bytes]) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    proc.wait(timeout=30)


def expected_completion(model: Path, lines: list[str], row: int, col: int) -> str:
    """The pipeline's completion, in this process, for the buffer as Neovim holds it."""
    from engine import Engine

    text = "\n".join(lines) + "\n"
    offset = len("".join(text.splitlines(keepends=True)[:row])) + col
    completion = Pipeline(Engine.load(str(model), device="cpu")).complete(
        CompletionRequest(text, offset, language_for("python"), "file:///x.py"))
    assert completion is not None and completion.end == completion.start
    return completion.text


def shows_ghost_at(row: int, col: int) -> Callable[[dict[str, Any]], bool]:
    return lambda s: s["ghost"] is not None and (s["ghost"]["row"], s["ghost"]["col"]) == (row, col)


def ghost_text(state: dict[str, Any]) -> str:
    """What the extmark shows: the inline text, then each virtual line."""
    return "\n".join([state["ghost"]["text"], *state["ghost"]["lines"]])


@pytest.fixture(scope="module")
def ghost_run(tmp_path_factory: pytest.TempPathFactory, model: Path) -> dict[str, Any]:
    """One Neovim 0.11 session: type, see, move, leave, accept by word, by line, rewrite.
    Each step's state is kept; a step that times out ends the session (later steps missing)."""
    nvim = nvim_or_skip("wheel")
    tmp = tmp_path_factory.mktemp("nvim-ghost")
    fib, stack = tmp / "fib.py", tmp / "stack.py"
    fib.write_text(FIB_TYPED)
    stack.write_text(STACK)
    socket = tempfile.mkdtemp(prefix="dg-nvim-") + "/nvim.sock"  # short: sun_path is 108 bytes
    proc, neovim = start_neovim(nvim, tmp, model, fib, nvim_command(nvim, socket, tmp), socket)
    run: dict[str, Any] = {"error": None}
    try:
        neovim.keys(f"{FIB_ROW + 1}GA")
        neovim.wait("insert mode", lambda s: s["mode"] == "i")
        neovim.keys("urn")
        run["typed"] = neovim.wait("the ghost text", shows_ghost_at(FIB_ROW, 10), timeout=180)

        neovim.keys("<Left>")
        run["moved"] = neovim.state()
        time.sleep(1.5)  # the debounce (75 ms) many times over: a move asks nothing
        run["moved_later"] = neovim.state()

        neovim.keys("<Right>x<BS>")  # a keystroke asks again (the server's cache answers)
        neovim.wait("the ghost text again", shows_ghost_at(FIB_ROW, 10))
        neovim.keys("<Esc>")
        run["left"] = neovim.wait("normal mode", lambda s: s["mode"] == "n")

        neovim.keys("Ax<BS>")
        neovim.wait("the ghost text once more", shows_ghost_at(FIB_ROW, 10))
        neovim.keys("<M-Right>")
        run["word1"] = neovim.wait("a word accepted", lambda s: s["lines"] != run["typed"]["lines"])
        neovim.keys("<M-Right>")
        run["word2"] = neovim.wait("a word accepted", lambda s: s["lines"] != run["word1"]["lines"])
        neovim.keys("<Tab>")
        run["accepted"] = neovim.wait("the rest accepted",
                                      lambda s: s["lines"] != run["word2"]["lines"])
        neovim.keys("<Esc>")
        neovim.wait("normal mode", lambda s: s["mode"] == "n")

        # fib.py closed: the server would show an open file of the same language to the model
        neovim.expr(f"execute('edit {stack} | bwipeout! {fib}')")
        neovim.wait("stack.py attached", lambda s: s["name"] == "stack.py" and s["attached"])
        neovim.keys(f"{STACK_ROW + 1}GA")
        neovim.wait("insert mode", lambda s: s["mode"] == "i")
        neovim.keys("x<BS>")
        run["block"] = neovim.wait("the block's ghost text", shows_ghost_at(STACK_ROW, 8))
        neovim.keys("<M-Down>")
        run["line1"] = neovim.wait("a line accepted", lambda s: s["lines"] != run["block"]["lines"])
        neovim.keys("<M-Down>")
        run["line2"] = neovim.wait("a line accepted", lambda s: s["lines"] != run["line1"]["lines"])
        neovim.keys("<Esc>")
        neovim.wait("normal mode", lambda s: s["mode"] == "n")

        run["before_rewrite"] = neovim.state()
        # lines 2-4 selected (V), then the code action as a mapping would ask for it
        neovim.keys("2GV4G<Cmd>lua DgTest.rewrite_action()<CR>")
        run["rewrite"] = neovim.wait("the rewrite applied",
                                     lambda s: "DgRewriteDone" in s["events"] or s["notes"],
                                     timeout=120)
    except TimeoutError as exc:
        run["error"] = str(exc)
    finally:
        stop(proc)
        shutil.rmtree(Path(socket).parent, ignore_errors=True)
    return run


def test_typing_shows_the_pipelines_completion_as_ghost_text(ghost_run: dict[str, Any],
                                                              model: Path):
    typed = ghost_run["typed"]
    assert typed["lines"] == FIB.split("\n")[:-1]  # exactly what was typed, nothing inserted
    assert typed["cursor"] == [FIB_ROW + 1, 10]
    expected = expected_completion(model, typed["lines"], FIB_ROW, 10)
    assert typed["ghost"]["pos"] == "inline" and typed["ghost"]["hl"] == "DgLspGhost"
    assert ghost_text(typed) == expected
    assert typed["marks"] == 1
    # the model was loaded while Neovim waited: work-done progress, then the engine's state
    assert [p["kind"] for p in typed["progress"]] == ["begin", "end"]
    assert typed["progress"][0]["title"] == "dg-lsp"
    assert typed["engine"]["state"] == "ready"


def test_moving_the_cursor_or_leaving_insert_mode_clears_it(ghost_run: dict[str, Any]):
    assert ghost_run["moved"]["cursor"] == [FIB_ROW + 1, 9]
    assert ghost_run["moved"]["ghost"] is None
    assert ghost_run["moved_later"]["ghost"] is None  # and no new suggestion for a mere move
    assert ghost_run["moved_later"]["events"].count("DgGhostText") == 1
    assert ghost_run["left"]["ghost"] is None and ghost_run["left"]["mode"] == "n"
    assert ghost_run["left"]["lines"] == ghost_run["typed"]["lines"]


def test_accept_by_word_then_tab_types_the_suggestion(ghost_run: dict[str, Any]):
    assert ghost_run["error"] is None, ghost_run["error"]
    suggestion = ghost_text(ghost_run["typed"])
    assert suggestion == " fibonacci(n)"  # the bundled model's; the words below are its own
    line = "    return"
    word1, word2 = ghost_run["word1"], ghost_run["word2"]
    assert word1["lines"][FIB_ROW] == line + " fibonacci"
    assert word1["cursor"] == [FIB_ROW + 1, len(line + " fibonacci")]
    assert ghost_text(word1) == "(n)"  # the rest stays shown after the cursor
    assert (word1["ghost"]["row"], word1["ghost"]["col"]) == (FIB_ROW, len(line + " fibonacci"))
    assert word2["lines"][FIB_ROW] == line + " fibonacci("
    assert ghost_text(word2) == "n)"
    accepted = ghost_run["accepted"]
    assert accepted["lines"] == FIB.replace("    return\n", line + suggestion + "\n").split(
        "\n")[:-1]
    assert accepted["cursor"] == [FIB_ROW + 1, len(line + suggestion)]
    assert accepted["ghost"] is None and accepted["mode"] == "i"


def test_a_block_is_drawn_on_virtual_lines_and_accepted_line_by_line(
        ghost_run: dict[str, Any], model: Path):
    assert ghost_run["error"] is None, ghost_run["error"]
    block = ghost_run["block"]
    assert block["lines"] == STACK.split("\n")[:-1]
    expected = expected_completion(model, block["lines"], STACK_ROW, 8)
    first, *rest = expected.split("\n")
    assert rest, f"the bundled model's completion here is one line: {expected!r}"
    assert block["ghost"]["text"] == first and block["ghost"]["lines"] == rest
    line1 = ghost_run["line1"]
    assert line1["lines"][STACK_ROW] == " " * 8 + first
    assert line1["ghost"]["text"] == "" and line1["ghost"]["lines"] == rest
    line2 = ghost_run["line2"]
    assert line2["lines"] == (STACK[:-1] + expected + "\n").split("\n")[:-1]
    assert line2["cursor"] == [STACK_ROW + 1 + len(rest), len(rest[-1])]
    assert line2["ghost"] is None


def test_the_rewrite_code_action_prompts_and_applies_the_servers_edit(ghost_run: dict[str, Any]):
    assert ghost_run["error"] is None, ghost_run["error"]
    before, after = ghost_run["before_rewrite"]["lines"], ghost_run["rewrite"]["lines"]
    assert ghost_run["rewrite"]["notes"] == []
    assert ghost_run["rewrite"]["prompts"] == ["Rewrite instruction: "]
    (applied,) = ghost_run["rewrite"]["applied"]
    edit = applied["edit"]
    ((text_edit,),) = list(edit.get("changes", {}).values()) + [
        change["edits"] for change in edit.get("documentChanges", [])]
    start, end = text_edit["range"]["start"], text_edit["range"]["end"]
    assert (start["line"], end["line"]) == (1, 3)  # within the selected lines 2-4
    head = before[start["line"]][:start["character"]]
    tail = before[end["line"]][end["character"]:]
    expected = (before[:start["line"]] + (head + text_edit["newText"] + tail).split("\n")
                + before[end["line"] + 1:])
    assert after == expected and after != before
