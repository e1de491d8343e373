"""Ghost text in a real Neovim 0.11, typed into as a person would.

Headless Neovim (`nvim --headless --clean --listen SOCKET`, the plugin in editors/neovim on the
runtimepath, `dg-lsp serve --engine inproc` with the bundled model) gets its keys through
`nvim --server SOCKET --remote-send` (nvim_input, as if typed); `--remote-expr` reads the
buffer, the cursor and the ghost text's extmark. The suggestion drawn must be exactly the
completion the same pipeline computes in this process for the buffer as Neovim holds it, and
accepting it (whole, by word, by line) must put exactly that text in the buffer.

A scripted server (pygls, fixed answers) covers what the bundled model does not produce on
demand: closers after the cursor, a block before a closer, an answer overtaken by a keystroke.

tmux: the same Neovim in a terminal; the screen captured with `tmux capture-pane -e` must show
the suggestion after the typed text, in another colour. With Pillow the capture is rendered to
a PNG; DG_UPDATE_PICTURES=1 writes it to docs/img/neovim-ghost-text.png (the READMEs' picture).
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.support import nvim_harness as harness
from tests.support.nvim_harness import (
    CAPTURE_LUA,
    FIB,
    FONTS,
    GATE_OFF_LUA,
    ROOT,
    Neovim,
    capture_screen,
    expected_completion,
    nvim_command,
    nvim_or_skip,
    parse_screen,
    render_png,
    stop,
    stop_tmux,
    tmux_or_skip,
)

pytestmark = pytest.mark.e2e  # a real Neovim, typed into

FIB_TYPED = FIB.replace("    return\n", "    ret\n")  # "urn" is typed
FIB_ROW = 7  # 0-based: `    return`
NODE = "class Node:\n    def __init__(self, config):\n        \n"
NODE_ROW = 2  # 0-based: the empty body line, 8 spaces
INSTRUCTION = "add type hints"
# For the rewrite of Node.__init__: asked to add type hints (or "use a list") there, the
# bundled model renames the parameter `config`, which is refused (dg_lsp.actions.signature).
NODE_INSTRUCTION = "use a dict"
PICTURE = ROOT / "docs" / "img" / "neovim-ghost-text.png"

# Loaded into the Neovim under test: the plugin as a user sets it up, stubs for the prompt,
# and DgTest.state(), which the test reads through --remote-expr.
SETUP_LUA = CAPTURE_LUA + """
vim.cmd("filetype plugin indent on")
out.progress, out.events, out.messages = {}, {}, {}
-- kept, not shown: in a terminal a shown message can wait for Enter
vim.lsp.handlers["window/showMessage"] = function(_, result)
  table.insert(out.messages, result.message)
end
vim.api.nvim_create_autocmd("LspProgress", { callback = function(event)
  local value = event.data.params.value
  -- what a statusline with %{v:lua.vim.lsp.status()} shows at that moment
  table.insert(out.progress, { kind = value.kind, title = value.title, message = value.message,
                               status = vim.lsp.status() })
end })
for _, name in ipairs({ "DgGhostText", "DgGhostAccepted", "DgRewriteDone" }) do
  vim.api.nvim_create_autocmd("User", { pattern = name, callback = function()
    table.insert(out.events, name)
  end })
end
out.shown = {} -- every suggestion drawn (its whole text), in order
vim.api.nvim_create_autocmd("User", { pattern = "DgGhostText", callback = function()
  table.insert(out.shown, require("dg_lsp").ghost().text)
end })

local dg = require("dg_lsp")
dg.setup({ cmd = vim.fn.json_decode(vim.env.DG_CMD), """ + GATE_OFF_LUA + """ })
vim.cmd("edit " .. vim.env.DG_FILE)

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
    notes = out.notes, messages = out.messages, prompts = out.prompts, applied = out.applied,
    progress = out.progress, events = out.events, shown = out.shown,
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


def start_neovim(nvim: str, tmp: Path, model: Path, source: Path, argv: list[str],
                 socket: str, **extra_env: str) -> tuple[subprocess.Popen[bytes], Neovim]:
    """harness.start_neovim with SETUP_LUA, the prompt answered with INSTRUCTION."""
    return harness.start_neovim(nvim, tmp, model, source, argv, socket, SETUP_LUA,
                                **{"DG_INSTRUCTION": INSTRUCTION, **extra_env})


def shows_ghost_at(row: int, col: int) -> Callable[[dict[str, Any]], bool]:
    return lambda s: s["ghost"] is not None and (s["ghost"]["row"], s["ghost"]["col"]) == (row, col)


def ghost_text(state: dict[str, Any]) -> str:
    """What the extmark shows: the inline text, then each virtual line."""
    return "\n".join([state["ghost"]["text"], *state["ghost"]["lines"]])


@pytest.fixture(scope="module")
def ghost_run(tmp_path_factory: pytest.TempPathFactory, editor_model: Path) -> dict[str, Any]:
    """One Neovim 0.11 session: type, see, move, leave, accept by word, by line, rewrite.
    Each step's state is kept; a step that times out ends the session (later steps missing)."""
    nvim = nvim_or_skip("wheel")
    tmp = tmp_path_factory.mktemp("nvim-ghost")
    fib, node = tmp / "fib.py", tmp / "node.py"
    fib.write_text(FIB_TYPED)
    node.write_text(NODE)
    socket = tempfile.mkdtemp(prefix="dg-nvim-") + "/nvim.sock"  # short: sun_path is 108 bytes
    proc, neovim = start_neovim(nvim, tmp, editor_model, fib, nvim_command(nvim, socket, tmp),
                                socket, DG_INSTRUCTION=NODE_INSTRUCTION)
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
        neovim.expr(f"execute('edit {node} | bwipeout! {fib}')")
        neovim.wait("node.py attached", lambda s: s["name"] == "node.py" and s["attached"])
        neovim.keys(f"{NODE_ROW + 1}GA")
        neovim.wait("insert mode", lambda s: s["mode"] == "i")
        neovim.keys("x<BS>")
        run["block"] = neovim.wait("the block's ghost text", shows_ghost_at(NODE_ROW, 8))
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
                                                              editor_model: Path):
    typed = ghost_run["typed"]
    assert typed["lines"] == FIB.split("\n")[:-1]  # exactly what was typed, nothing inserted
    assert typed["cursor"] == [FIB_ROW + 1, 10]
    expected = expected_completion(editor_model, typed["lines"], FIB_ROW, 10)
    assert typed["ghost"]["pos"] == "inline" and typed["ghost"]["hl"] == "DgLspGhost"
    assert ghost_text(typed) == expected
    assert typed["marks"] == 1
    assert typed["messages"] == [] and typed["notes"] == []  # e.g. no "invalid settings"
    # the model was loaded while Neovim waited: work-done progress (reports every 2 s while it
    # loads), shown by vim.lsp.status(), then the engine's state
    progress = typed["progress"]
    kinds = [p["kind"] for p in progress]
    assert kinds[0] == "begin" and kinds[-1] == "end" and set(kinds[1:-1]) <= {"report"}
    assert progress[0]["status"] == f"dg-lsp: loading {editor_model}"
    assert all(p["status"].startswith(f"dg-lsp: loading {editor_model} (") for p in progress[1:-1])
    assert progress[-1]["status"] == "dg-lsp: ready on cpu"
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
        ghost_run: dict[str, Any], editor_model: Path):
    assert ghost_run["error"] is None, ghost_run["error"]
    block = ghost_run["block"]
    assert block["lines"] == NODE.split("\n")[:-1]
    expected = expected_completion(editor_model, block["lines"], NODE_ROW, 8)
    first, *rest = expected.split("\n")
    assert rest, f"the bundled model's completion here is one line: {expected!r}"
    assert block["ghost"]["text"] == first and block["ghost"]["lines"] == rest
    line1 = ghost_run["line1"]
    assert line1["lines"][NODE_ROW] == " " * 8 + first
    assert line1["ghost"]["text"] == "" and line1["ghost"]["lines"] == rest
    line2 = ghost_run["line2"]
    assert line2["lines"] == (NODE[:-1] + first + "\n" + rest[0] + "\n").split("\n")[:-1]
    assert line2["cursor"] == [NODE_ROW + 2, len(rest[0])]
    if rest[1:]:  # the lines still to accept
        assert line2["ghost"]["text"] == "" and line2["ghost"]["lines"] == rest[1:]
    else:
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


# -- in a terminal: tmux ----------------------------------------------------------------------

COLUMNS, ROWS = 64, 8
@pytest.fixture(scope="module")
def tmux_run(tmp_path_factory: pytest.TempPathFactory, editor_model: Path) -> dict[str, Any]:
    """Neovim 0.11 in an 64x8 tmux window: open a line, type a method's header, Enter; the
    screen once the ghost text is drawn."""
    nvim, tmux = nvim_or_skip("wheel"), tmux_or_skip()
    tmp = tmp_path_factory.mktemp("nvim-tmux")
    source = tmp / "node.py"
    source.write_text("class Node:\n")
    folder = tempfile.mkdtemp(prefix="dg-tmux-")  # short paths: sun_path is 108 bytes
    socket, tmux_socket = f"{folder}/nvim.sock", f"{folder}/tmux.sock"
    tmux_cmd = [tmux, "-S", tmux_socket, "-f", "/dev/null"]
    # exec: the pane's process is Neovim itself, so the end of the test can find its server
    argv = [*tmux_cmd, "new-session", "-d", "-x", str(COLUMNS), "-y", str(ROWS),
            "exec " + shlex.join(nvim_command(nvim, socket, tmp, headless=False))]
    run: dict[str, Any] = {"error": None}
    try:
        proc, neovim = start_neovim(nvim, tmp, editor_model, source, argv, socket,
                                    TERM="tmux-256color", COLORTERM="truecolor")
        def tmux_keys(*keys: str) -> None:
            subprocess.run([*tmux_cmd, "send-keys", *keys], check=True, timeout=30)

        tmux_keys("o")  # a new line: Python's indent puts 4 spaces
        neovim.wait("insert mode", lambda s: s["mode"] == "i")
        tmux_keys("-l", "def __init__(self, config):")
        tmux_keys("Enter")
        state = neovim.wait("the ghost text", shows_ghost_at(NODE_ROW, 8), timeout=180)
        run["state"] = state
        expected = ghost_text(state)
        deadline = time.monotonic() + 30
        while True:  # the screen catches up with the extmark at the next redraw
            captured = subprocess.run([*tmux_cmd, "capture-pane", "-p", "-e"], text=True,
                                      capture_output=True, timeout=30).stdout
            screen = parse_screen(captured, COLUMNS, ROWS)
            if expected.split("\n")[0] in "".join(ch for ch, _ in screen[NODE_ROW]):
                break
            assert time.monotonic() < deadline, captured
            time.sleep(0.1)
        x, y = subprocess.run([*tmux_cmd, "display", "-p", "#{cursor_x} #{cursor_y}"],
                              text=True, capture_output=True, timeout=30).stdout.split()
        run.update(captured=captured, screen=screen, cursor=(int(x), int(y)))
    except TimeoutError as exc:
        run["error"] = str(exc)
    finally:
        stop_tmux(tmux_cmd, folder)
    return run


def test_the_terminal_shows_the_suggestion_after_the_cursor_in_its_own_colour(
        tmux_run: dict[str, Any], editor_model: Path):
    assert tmux_run["error"] is None, tmux_run["error"]
    lines = tmux_run["state"]["lines"]
    assert lines == NODE.split("\n")[:-1]  # typed: the header, then Enter (indent by Python's)
    expected = expected_completion(editor_model, lines, NODE_ROW, 8)
    assert ghost_text(tmux_run["state"]) == expected
    screen, (x, y) = tmux_run["screen"], tmux_run["cursor"]
    assert (x, y) == (8, NODE_ROW)  # no sign or number column: screen cells are buffer bytes
    first, *rest = expected.split("\n")
    ghost_cells = screen[y][x:x + len(first)]
    below = [screen[y + 1 + i][:len(line)] for i, line in enumerate(rest)]
    assert "".join(ch for ch, _ in ghost_cells) == first
    assert ["".join(ch for ch, _ in cells) for cells in below] == rest
    ghost_styles = {style for cells in [ghost_cells, *below] for ch, style in cells if ch != " "}
    typed_styles = {style for row in screen[:NODE_ROW + 1] for ch, style in row[:x]
                    if ch != " "} | {style for ch, style in screen[1] if ch != " "}
    assert len(ghost_styles) == 1, ghost_styles  # one highlight: DgLspGhost
    assert ghost_styles.isdisjoint(typed_styles), (ghost_styles, typed_styles)


def test_the_screen_as_a_picture(tmux_run: dict[str, Any], tmp_path: Path):
    """Renders the tmux capture to a PNG; DG_UPDATE_PICTURES=1 also writes it to docs/img/
    for the READMEs."""
    assert tmux_run["error"] is None, tmux_run["error"]
    image_module = pytest.importorskip("PIL.Image", reason="Pillow is not installed "
                                       "(pip install pillow: the picture only)")
    if not (FONTS / "DejaVuSansMono.ttf").exists():
        pytest.skip("DejaVu Sans Mono is not installed (apt-get install fonts-dejavu-core)")
    path = tmp_path / PICTURE.name
    render_png(tmux_run["screen"], tmux_run["cursor"], path)
    assert path.stat().st_size < 60_000
    image = image_module.open(path)
    assert image.size[0] > COLUMNS * 8 and image.size[1] > ROWS * 15
    if os.environ.get("DG_UPDATE_PICTURES") == "1":
        PICTURE.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(path, PICTURE)


# A rewrite in the same terminal, before and after: fib.py's `fibonacci` (lines 4-8) selected
# with V, `:'<,'>DgRewrite add type hints` typed; the screen as it waits for Enter, and after.
REWRITE_COLUMNS, REWRITE_ROWS = 64, 16
REWRITE_PICTURES = {"before": ROOT / "docs" / "img" / "neovim-rewrite-before.png",
                    "after": ROOT / "docs" / "img" / "neovim-rewrite-after.png"}


@pytest.fixture(scope="module")
def tmux_rewrite_run(tmp_path_factory: pytest.TempPathFactory,
                     editor_model: Path) -> dict[str, Any]:
    nvim, tmux = nvim_or_skip("wheel"), tmux_or_skip()
    tmp = tmp_path_factory.mktemp("nvim-tmux-rewrite")
    source = tmp / "fib.py"
    source.write_text(FIB)
    folder = tempfile.mkdtemp(prefix="dg-tmux-")  # short paths: sun_path is 108 bytes
    socket, tmux_socket = f"{folder}/nvim.sock", f"{folder}/tmux.sock"
    tmux_cmd = [tmux, "-S", tmux_socket, "-f", "/dev/null"]
    argv = [*tmux_cmd, "new-session", "-d", "-x", str(REWRITE_COLUMNS), "-y", str(REWRITE_ROWS),
            "exec " + shlex.join(nvim_command(nvim, socket, tmp, headless=False))]

    def capture(until: Callable[[list[str]], bool]) -> dict[str, Any]:
        return capture_screen(tmux_cmd, REWRITE_COLUMNS, REWRITE_ROWS, until)

    run: dict[str, Any] = {"error": None}
    try:
        proc, neovim = start_neovim(nvim, tmp, editor_model, source, argv, socket,
                                    TERM="tmux-256color", COLORTERM="truecolor")
        subprocess.run([*tmux_cmd, "send-keys", "-l", "4GV8G:DgRewrite " + INSTRUCTION],
                       check=True, timeout=30)
        run["before"] = capture(lambda rows: rows[-1].endswith("DgRewrite " + INSTRUCTION))
        run["lines_before"] = neovim.state()["lines"]
        subprocess.run([*tmux_cmd, "send-keys", "Enter"], check=True, timeout=30)
        state = neovim.wait("the rewrite applied",
                            lambda s: "DgRewriteDone" in s["events"] or s["notes"], timeout=120)
        run["state"] = state
        run["after"] = capture(lambda rows: rows[:len(state["lines"])] == state["lines"])
    except TimeoutError as exc:
        run["error"] = str(exc)
    finally:
        stop_tmux(tmux_cmd, folder)
    return run


def test_a_rewrite_in_the_terminal_before_and_after(tmux_rewrite_run: dict[str, Any]):
    assert tmux_rewrite_run["error"] is None, tmux_rewrite_run["error"]
    before, after = tmux_rewrite_run["before"], tmux_rewrite_run["after"]
    lines = FIB.split("\n")[:-1]
    assert tmux_rewrite_run["lines_before"] == lines
    assert before["text"][:len(lines)] == lines
    assert before["text"][-1] == ":'<,'>DgRewrite " + INSTRUCTION  # what was typed, on screen
    state = tmux_rewrite_run["state"]
    assert state["notes"] == [] and "DgRewriteDone" in state["events"]
    new = state["lines"]
    assert new != lines and new[:3] == lines[:3] and new[-3:] == lines[-3:]  # 4-8 only
    assert after["text"][:len(new)] == new


def test_the_rewrite_as_pictures(tmux_rewrite_run: dict[str, Any], tmp_path: Path):
    """DG_UPDATE_PICTURES=1 writes them to docs/img/ for the READMEs."""
    assert tmux_rewrite_run["error"] is None, tmux_rewrite_run["error"]
    pytest.importorskip("PIL.Image", reason="Pillow is not installed (pip install pillow: "
                        "the pictures only)")
    if not (FONTS / "DejaVuSansMono.ttf").exists():
        pytest.skip("DejaVu Sans Mono is not installed (apt-get install fonts-dejavu-core)")
    for name, picture in REWRITE_PICTURES.items():
        shown = tmux_rewrite_run[name]
        path = tmp_path / picture.name
        # before: typing on the command line (a bar); after: normal mode (a block)
        render_png(shown["screen"], shown["cursor"], path, bar=name == "before")
        assert path.stat().st_size < 60_000
        if os.environ.get("DG_UPDATE_PICTURES") == "1":
            shutil.copyfile(path, picture)


# -- a scripted server: the cases the bundled model does not produce on demand ----------------

# Answers by the text before the cursor. "slow" answers after a second: the keystroke typed
# meanwhile makes it stale. ("replace": characters after the cursor the text types again.)
SCRIPTED_SERVER = '''
import json, sys, time
from lsprotocol import types
from pygls.lsp.server import LanguageServer

ANSWERS = json.loads(sys.argv[1])
server = LanguageServer("scripted", "0")

@server.feature(types.TEXT_DOCUMENT_INLINE_COMPLETION)
def inline(ls, params):  # synchronous: a sleep holds every later message back
    line = ls.workspace.get_text_document(params.text_document.uri).lines[params.position.line]
    answer = ANSWERS.get(line[:params.position.character])
    if answer is None:
        return types.InlineCompletionList(items=[])
    time.sleep(answer.get("delay", 0))
    start = params.position
    end = types.Position(start.line, start.character + answer.get("replace", 0))
    return types.InlineCompletionList(items=[types.InlineCompletionItem(
        insert_text=answer["text"], range=types.Range(start, end))])

server.start_io()
'''
SCRIPTED = {
    "print(foo(": {"text": "1, 2))", "replace": 2},  # the line: print(foo(|))
    "x = [": {"text": "\n    1,\n]", "replace": 1},  # the line: x = [|]
    "slow": {"text": "STALE", "delay": 1.0},
    "slowe": {"text": "r = 1"},
}
SCRIPTED_FILE = "print(foo())\nx = []\n\n"


@pytest.fixture(scope="module")
def scripted_run(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    nvim = nvim_or_skip("wheel")
    tmp = tmp_path_factory.mktemp("nvim-scripted")
    source = tmp / "scripted.py"
    source.write_text(SCRIPTED_FILE)
    server = tmp / "server.py"
    server.write_text(SCRIPTED_SERVER)
    socket = tempfile.mkdtemp(prefix="dg-nvim-") + "/nvim.sock"
    command = json.dumps([sys.executable, str(server), json.dumps(SCRIPTED)])
    # DG_CMD replaces the dg-lsp command: no model is loaded (the model argument is unused)
    proc, neovim = start_neovim(nvim, tmp, tmp, source, nvim_command(nvim, socket, tmp), socket,
                                DG_CMD=command)
    run: dict[str, Any] = {"error": None}
    try:
        neovim.keys("1G010li")  # insert between "print(foo(" and "))"
        neovim.wait("insert mode", lambda s: s["mode"] == "i")
        neovim.keys("x<BS>")
        run["closers"] = neovim.wait("the ghost text", shows_ghost_at(0, 10))
        neovim.keys("<Tab>")
        run["closers_accepted"] = neovim.wait("accepted", lambda s: s["ghost"] is None)
        neovim.keys("<Esc>2G05li")  # insert between "x = [" and "]"
        neovim.wait("insert mode", lambda s: s["mode"] == "i" and s["cursor"] == [2, 5])
        neovim.keys("x<BS>")
        run["block"] = neovim.wait("the ghost text", shows_ghost_at(1, 5))
        neovim.keys("<M-Down>")
        run["line1"] = neovim.wait("a line accepted", lambda s: s["lines"] != run["block"]["lines"])
        neovim.keys("<M-Down>")
        run["line2"] = neovim.wait("a line accepted", lambda s: s["lines"] != run["line1"]["lines"])
        neovim.keys("<Esc>Gi")  # the last line, empty
        neovim.wait("insert mode", lambda s: s["mode"] == "i" and s["cursor"] == [5, 0])
        neovim.keys("slow")
        time.sleep(0.4)  # the request for "slow" is out (75 ms debounce); its answer is not
        neovim.keys("e")
        neovim.wait("the fresh ghost text", shows_ghost_at(4, 5), timeout=30)
        time.sleep(1.5)  # room for the stale answer to be drawn, were it drawn
        run["stale"] = neovim.state()
        neovim.keys("z")  # the scripted server has nothing for "slowez"
        neovim.wait("z typed", lambda s: s["lines"][-1] == "slowez")
        time.sleep(0.5)
        run["typed_over"] = neovim.state()
        neovim.keys("<Cmd>setlocal noexpandtab softtabstop=0<CR><Tab>")
        run["tab"] = neovim.wait("Tab typed", lambda s: s["lines"][-1] != "slowez")
    except TimeoutError as exc:
        run["error"] = str(exc)
    finally:
        stop(proc)
        shutil.rmtree(Path(socket).parent, ignore_errors=True)
    return run


def test_closers_after_the_cursor_are_not_drawn_twice_and_are_replaced(
        scripted_run: dict[str, Any]):
    closers = scripted_run["closers"]
    assert closers["lines"][0] == "print(foo())"
    assert closers["ghost"]["text"] == "1, 2" and closers["ghost"]["lines"] == []
    accepted = scripted_run["closers_accepted"]
    assert accepted["lines"][0] == "print(foo(1, 2))"
    assert accepted["cursor"] == [1, len("print(foo(1, 2))")]


def test_a_block_before_a_closer_lands_around_it(scripted_run: dict[str, Any]):
    assert scripted_run["error"] is None, scripted_run["error"]
    block = scripted_run["block"]
    assert block["ghost"]["text"] == "" and block["ghost"]["lines"] == ["    1,", "]"]
    line1 = scripted_run["line1"]
    assert line1["lines"][1:3] == ["x = [", "    1,]"]  # the real "]" follows the cursor
    assert line1["ghost"]["text"] == "" and line1["ghost"]["lines"] == ["]"]
    line2 = scripted_run["line2"]
    assert line2["lines"] == ["print(foo(1, 2))", "x = [", "    1,", "]", ""]
    assert line2["cursor"] == [4, 1] and line2["ghost"] is None


def test_an_answer_for_an_older_keystroke_is_never_drawn(scripted_run: dict[str, Any]):
    assert scripted_run["error"] is None, scripted_run["error"]
    stale = scripted_run["stale"]
    assert stale["lines"][-1] == "slowe"
    assert stale["ghost"]["text"] == "r = 1"
    # every suggestion drawn, in order
    assert stale["shown"] == ["1, 2))", "\n    1,\n]", "r = 1"]


def test_a_keystroke_clears_it_and_tab_without_a_suggestion_is_a_tab(
        scripted_run: dict[str, Any]):
    assert scripted_run["error"] is None, scripted_run["error"]
    assert scripted_run["typed_over"]["ghost"] is None and scripted_run["typed_over"]["marks"] == 0
    assert scripted_run["tab"]["lines"][-1] == "slowez\t"
    assert scripted_run["tab"]["ghost"] is None
