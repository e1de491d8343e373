"""Next-edit suggestions in a real Neovim 0.11, edited as a person would.

Neovim (the plugin in editors/neovim, `dg-lsp serve --engine inproc` with the bundled model)
runs in tmux where tmux is installed (the screen is captured too), else headless; keys go in
through `nvim --server SOCKET --remote-send`. A word is renamed (`ciw` + the new name), and the
plugin asks for `textDocument/copilotInlineEdit` by itself after the debounce. The Lua below
records every answer the server gives those requests (the client's `request` wrapped), so the
extmarks drawn are checked exactly against the server's edit, whatever the model wrote: the
replaced range highlighted `DgLspNextEditDelete`, the new text inline after it
(`DgLspNextEditInsert`). <Tab> goes to the suggestion's start, <Tab> again applies exactly that
edit and runs its command: the server's `dg-lsp.stats` then counts it shown and accepted. A
second rename, left in insert mode, is dismissed with <Esc>: no extmark left, buffer as typed,
normal mode, and no new suggestion for the same text.

The bundled model may suggest nothing after a given rename (it may be retrained): the renames in
VARIANTS are tried in order until one gets a suggestion; which one did is in the run.
DG_UPDATE_PICTURES=1 writes the tmux screen with the suggestion to docs/img/neovim-next-edit.png.
"""

from __future__ import annotations

import os
import shlex
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

import pytest

from tests.support.nvim_harness import (
    CAPTURE_LUA,
    FONTS,
    ROOT,
    capture_screen,
    nvim_command,
    nvim_or_skip,
    render_png,
    start_neovim,
    stop,
    stop_tmux,
)

pytestmark = pytest.mark.e2e  # a real Neovim, typed into

# (file, 0-based row and column of the word renamed, its new name): the first is the classic
# rename; the others are ones the bundled model answered when this test was written.
VARIANTS = [
    ("def total_price(items):\n    count = 0\n    for item in items:\n"
     "        count += item.price\n    return count\n", 1, 4, "total"),
    ("def area(width, height):\n    w = width\n    return w * height\n", 1, 4, "wid"),
    ("def f(x):\n    y = x + 1\n    return y\n", 1, 4, "z"),
    ("def area(width, height):\n    h = height\n    return width * h\n", 1, 4, "hgt"),
]
COLUMNS, ROWS = 64, 8
PICTURE = ROOT / "docs" / "img" / "neovim-next-edit.png"

SETUP_LUA = CAPTURE_LUA + """
vim.cmd("filetype plugin indent on")
out.events, out.messages, out.answers = {}, {}, {}
vim.lsp.handlers["window/showMessage"] = function(_, result)
  table.insert(out.messages, result.message)
end
for _, name in ipairs({ "DgNextEdit", "DgNextEditDone", "DgNextEditAccepted" }) do
  vim.api.nvim_create_autocmd("User", { pattern = name, callback = function()
    table.insert(out.events, name)
  end })
end

local dg = require("dg_lsp")
-- What the server answers the plugin's requests: the client's request method wrapped.
vim.api.nvim_create_autocmd("LspAttach", { callback = function(event)
  local client = vim.lsp.get_client_by_id(event.data.client_id)
  if client == nil or client.name ~= dg.name or client.dg_test_wrapped then
    return
  end
  client.dg_test_wrapped = true
  local request = client.request
  client.request = function(self, method, params, handler, bufnr)
    if method == dg.inline_edit_method and handler then
      local inner = handler
      handler = function(err, result, ctx, config)
        table.insert(out.answers, { version = params.textDocument.version,
                                    position = params.position,
                                    error = err and (err.message or "error") or vim.NIL,
                                    result = result or vim.NIL })
        return inner(err, result, ctx, config)
      end
    end
    return request(self, method, params, handler, bufnr)
  end
end })
dg.setup({ cmd = vim.fn.json_decode(vim.env.DG_CMD) })
vim.cmd("edit " .. vim.env.DG_FILE)

local function chunks(list)
  local found = {}
  for _, chunk in ipairs(list or {}) do
    table.insert(found, { chunk[1], chunk[2] or "" })
  end
  return found
end

DgTest = {}
function DgTest.state()
  local buf = vim.api.nvim_get_current_buf()
  local marks = {}
  for _, mark in ipairs(vim.api.nvim_buf_get_extmarks(buf, dg.next_edit_namespace, 0, -1,
                                                      { details = true })) do
    local d = mark[4]
    local lines = {}
    for _, line in ipairs(d.virt_lines or {}) do
      table.insert(lines, chunks(line))
    end
    table.insert(marks, { row = mark[2], col = mark[3], end_row = d.end_row or -1,
                          end_col = d.end_col or -1, hl_group = d.hl_group or "",
                          virt_text = chunks(d.virt_text), pos = d.virt_text_pos or "",
                          virt_lines = lines })
  end
  local client = dg.client(buf)
  local shown = dg.next_edit(buf)
  return vim.json.encode({
    mode = vim.api.nvim_get_mode().mode, name = vim.fn.expand("%:t"),
    lines = vim.api.nvim_buf_get_lines(buf, 0, -1, false),
    cursor = vim.api.nvim_win_get_cursor(0), marks = marks,
    version = vim.lsp.util.buf_versions[buf], tick = vim.api.nvim_buf_get_changedtick(buf),
    shown = shown and { text = shown.text, range = shown.edit.range, tick = shown.tick }
      or vim.NIL,
    attached = client ~= nil and client.initialized == true,
    answers = out.answers, events = out.events, notes = out.notes, messages = out.messages,
    stats = out.stats or vim.NIL,
  })
end

-- The server's counters (dg-lsp.stats), into out.stats.
function DgTest.ask_stats()
  out.stats = nil
  dg.client(0):request("workspace/executeCommand", { command = "dg-lsp.stats", arguments = {} },
    function(err, result) out.stats = result or { error = err and err.message } end, 0)
  return ""
end
"""


def answer_for(state: dict[str, Any]) -> dict[str, Any] | None:
    """The server's answer to the plugin's request for the buffer as it is now, if in."""
    answers = [a for a in state["answers"] if a["version"] == state["version"]]
    return answers[-1] if answers else None


def rename_keys(row: int, col: int, new: str) -> str:
    return f"{row + 1}G0" + (f"{col}l" if col else "") + f"ciw{new}"


def renamed(text: str, row: int, col: int, new: str) -> list[str]:
    lines = text.split("\n")[:-1]
    line = lines[row]
    end = col
    while end < len(line) and (line[end].isalnum() or line[end] == "_"):
        end += 1
    lines[row] = line[:col] + new + line[end:]
    return lines


def applied(lines: list[str], edit: dict[str, Any]) -> list[str]:
    """`lines` with the server's edit applied (ASCII text: characters are columns)."""
    start, end = edit["range"]["start"], edit["range"]["end"]
    head = lines[start["line"]][:start["character"]]
    tail = lines[end["line"]][end["character"]:]
    return (lines[:start["line"]] + (head + edit["text"] + tail).split("\n")
            + lines[end["line"] + 1:])


def expected_marks(edit: dict[str, Any]) -> list[dict[str, Any]]:
    """The extmarks the plugin draws for `edit`: the replaced range, the new text after it."""
    start, end = edit["range"]["start"], edit["range"]["end"]
    first, *rest = edit["text"].split("\n")
    marks = []
    if start != end:
        marks.append({"row": start["line"], "col": start["character"], "end_row": end["line"],
                      "end_col": end["character"], "hl_group": "DgLspNextEditDelete",
                      "virt_text": [], "pos": "", "virt_lines": []})
    if edit["text"]:
        marks.append({"row": end["line"], "col": end["character"], "end_row": -1, "end_col": -1,
                      "hl_group": "", "virt_text": [[first, "DgLspNextEditInsert"]],
                      "pos": "inline",
                      "virt_lines": [[[line, "DgLspNextEditInsert"]] for line in rest]})
    return marks


@pytest.fixture(scope="module")
def next_edit_run(tmp_path_factory: pytest.TempPathFactory, editor_model: Path) -> dict[str, Any]:
    """One Neovim 0.11 session: renames until one gets a suggestion, Tab, Tab, the stats; the
    same rename in insert mode, Esc. Each step's state is kept; a step that times out ends the
    session (later steps missing)."""
    nvim = nvim_or_skip("wheel")
    tmux = shutil.which("tmux")
    tmp = tmp_path_factory.mktemp("nvim-next-edit")
    for i, (text, *_) in enumerate(VARIANTS):
        (tmp / f"v{i}.py").write_text(text)
    folder = tempfile.mkdtemp(prefix="dg-nvim-")  # short paths: sun_path is 108 bytes
    socket, tmux_socket = f"{folder}/nvim.sock", f"{folder}/tmux.sock"
    tmux_cmd = [tmux, "-S", tmux_socket, "-f", "/dev/null"] if tmux else []
    if tmux:
        argv = [*tmux_cmd, "new-session", "-d", "-x", str(COLUMNS), "-y", str(ROWS),
                "exec " + shlex.join(nvim_command(nvim, socket, tmp, headless=False))]
        extra = {"TERM": "tmux-256color", "COLORTERM": "truecolor"}
    else:
        argv, extra = nvim_command(nvim, socket, tmp), {}
    run: dict[str, Any] = {"error": None, "tmux": bool(tmux), "tried": []}
    started = time.monotonic()
    proc = None
    try:
        proc, neovim = start_neovim(nvim, tmp, editor_model, tmp / "v0.py", argv, socket,
                                    SETUP_LUA, **extra)
        for i, variant in enumerate(VARIANTS):
            text, row, col, new = variant  # the one shown is used below
            if i:
                neovim.expr(f"execute('edit {tmp / f'v{i}.py'}')")
                neovim.wait("the file attached",
                            lambda s, i=i: s["name"] == f"v{i}.py" and s["attached"])
            neovim.keys(rename_keys(row, col, new) + "<Esc>")
            state = neovim.wait("the server's answer", lambda s: answer_for(s) is not None
                                and "DgNextEditDone" in s["events"][-1:], timeout=60)
            run["tried"].append({"variant": i, "answer": answer_for(state)})
            if state["shown"] is not None:
                break
        else:
            return run  # no suggestion for any rename
        run["variant"] = i
        run["renamed"] = renamed(text, row, col, new)
        run["shown"] = state
        if tmux:
            edit = answer_for(state)["result"]["edits"][0]
            line = applied(state["lines"], {"range": {"start": edit["range"]["end"],
                                                      "end": edit["range"]["end"]},
                                            "text": edit["text"]})[edit["range"]["end"]["line"]]
            run["screen"] = capture_screen(
                tmux_cmd, COLUMNS, ROWS,
                lambda rows: rows[edit["range"]["end"]["line"]] == line.rstrip())
            run["screen_line"] = line
        neovim.keys("<Tab>")
        run["jumped"] = neovim.wait("the cursor moved",
                                    lambda s: s["cursor"] != run["shown"]["cursor"])
        neovim.keys("<Tab>")
        run["accepted"] = neovim.wait("the edit applied",
                                      lambda s: s["lines"] != run["shown"]["lines"])
        neovim.expr("v:lua.DgTest.ask_stats()")
        run["stats"] = neovim.wait("the stats", lambda s: s["stats"] is not None)["stats"]

        # the same rename in a new buffer, left in insert mode: <Esc> dismisses the suggestion
        (tmp / "esc.py").write_text(text)
        neovim.keys("<Esc>")
        neovim.expr(f"execute('edit {tmp / 'esc.py'}')")
        neovim.wait("esc.py attached", lambda s: s["name"] == "esc.py" and s["attached"])
        neovim.keys(rename_keys(row, col, new))
        run["esc_shown"] = neovim.wait("the suggestion in insert mode",
                                       lambda s: s["shown"] is not None and s["mode"] == "i")
        neovim.keys("<Esc>")
        run["dismissed"] = neovim.wait("normal mode", lambda s: s["mode"] == "n")
        time.sleep(1.0)  # the debounce (400 ms) over twice: nothing new is asked for or shown
        run["dismissed_later"] = neovim.state()

        # again, then the cursor moves away from it: two moves leave it, the third clears it
        (tmp / "moves.py").write_text(text)
        neovim.expr(f"execute('edit {tmp / 'moves.py'}')")
        neovim.wait("moves.py attached", lambda s: s["name"] == "moves.py" and s["attached"])
        neovim.keys(rename_keys(row, col, new) + "<Esc>")
        run["moves_shown"] = neovim.wait("the suggestion", lambda s: s["shown"] is not None)
        run["moves"] = []
        for key in ("gg", "l", "l"):  # the first line, then along it
            before = neovim.state()["cursor"]
            neovim.keys(key)
            run["moves"].append(neovim.wait("the cursor moved",
                                            lambda s, b=before: s["cursor"] != b))
        # and a change clears it at once (a new suggestion may come for the new text)
        neovim.keys("<Cmd>DgNextEdit<CR>")
        run["asked"] = neovim.wait("the suggestion again", lambda s: s["shown"] is not None)
        neovim.keys("A # a comment<Esc>")
        run["changed"] = neovim.wait("the change", lambda s: s["tick"] != run["asked"]["tick"])
    except TimeoutError as exc:
        run["error"] = str(exc)
    finally:
        run["seconds"] = time.monotonic() - started
        if tmux:
            stop_tmux(tmux_cmd, folder)
        if proc is not None:
            stop(proc)
        shutil.rmtree(folder, ignore_errors=True)
    return run


def test_a_rename_gets_a_suggestion(next_edit_run: dict[str, Any]):
    assert next_edit_run["error"] is None, next_edit_run["error"]
    tried = next_edit_run["tried"]
    print(f"renames tried: {tried}")
    assert all(t["answer"]["error"] is None for t in tried), tried
    assert "shown" in next_edit_run, f"the bundled model suggested nothing for {VARIANTS}"
    # every rename before the one shown was answered with no edit
    assert all(t["answer"]["result"]["edits"] == [] for t in tried[:-1]), tried


def test_the_suggestion_drawn_is_exactly_the_servers_edit(next_edit_run: dict[str, Any]):
    if "shown" not in next_edit_run:
        pytest.skip("no suggestion (test_a_rename_gets_a_suggestion says why)")
    shown = next_edit_run["shown"]
    assert shown["lines"] == next_edit_run["renamed"]  # exactly what was typed
    assert all(line.isascii() for line in shown["lines"])
    answer = next_edit_run["tried"][-1]["answer"]
    (edit,) = answer["result"]["edits"]
    assert edit["textDocument"]["version"] == shown["version"]
    assert edit["textDocument"]["uri"].endswith("/" + shown["name"])
    assert edit["command"]["command"] == "dg-lsp.inlineEditAccepted"
    assert shown["shown"] == {"text": edit["text"], "range": edit["range"],
                              "tick": shown["tick"]}
    assert shown["marks"] == expected_marks(edit)
    assert shown["mode"] == "n"
    assert shown["messages"] == [] and shown["notes"] == []


def test_tab_goes_to_the_suggestion_then_applies_it(next_edit_run: dict[str, Any]):
    if "shown" not in next_edit_run:
        pytest.skip("no suggestion (test_a_rename_gets_a_suggestion says why)")
    assert next_edit_run["error"] is None, next_edit_run["error"]
    shown = next_edit_run["shown"]
    (edit,) = next_edit_run["tried"][-1]["answer"]["result"]["edits"]
    start = edit["range"]["start"]
    assert shown["cursor"] != [start["line"] + 1, start["character"]]  # on the renamed word
    jumped = next_edit_run["jumped"]
    assert jumped["cursor"] == [start["line"] + 1, start["character"]]
    assert jumped["lines"] == shown["lines"] and jumped["marks"] == shown["marks"]
    accepted = next_edit_run["accepted"]
    assert accepted["lines"] == applied(shown["lines"], edit)
    assert "DgNextEditAccepted" in accepted["events"]
    stats = next_edit_run["stats"]
    assert stats["inlineEditsShown"] >= 1 and stats["inlineEditsAccepted"] == 1, stats


def test_esc_dismisses_it_and_leaves_insert_mode(next_edit_run: dict[str, Any]):
    if "shown" not in next_edit_run:
        pytest.skip("no suggestion (test_a_rename_gets_a_suggestion says why)")
    assert next_edit_run["error"] is None, next_edit_run["error"]
    esc_shown = next_edit_run["esc_shown"]
    assert esc_shown["lines"] == next_edit_run["renamed"]
    answer = answer_for(esc_shown)
    (edit,) = answer["result"]["edits"]
    assert esc_shown["marks"] == expected_marks(edit)
    for state in (next_edit_run["dismissed"], next_edit_run["dismissed_later"]):
        assert state["marks"] == [] and state["shown"] is None
        assert state["lines"] == next_edit_run["renamed"]  # unchanged
        assert state["mode"] == "n"
    # leaving insert mode changed nothing, so nothing more was asked
    assert next_edit_run["dismissed_later"]["answers"] == esc_shown["answers"]


def test_moving_away_or_changing_the_buffer_clears_it(next_edit_run: dict[str, Any]):
    if "shown" not in next_edit_run:
        pytest.skip("no suggestion (test_a_rename_gets_a_suggestion says why)")
    assert next_edit_run["error"] is None, next_edit_run["error"]
    shown = next_edit_run["moves_shown"]
    assert shown["marks"] == expected_marks(answer_for(shown)["result"]["edits"][0])
    first, second, third = next_edit_run["moves"]
    assert first["cursor"][0] == 1  # gg: the first line, further from the suggestion
    assert first["shown"] == shown["shown"] and first["marks"] == shown["marks"]
    assert second["shown"] == shown["shown"] and second["marks"] == shown["marks"]
    assert third["shown"] is None and third["marks"] == []
    assert third["lines"] == shown["lines"]
    # :DgNextEdit asks at once; a change clears what it showed
    asked, changed = next_edit_run["asked"], next_edit_run["changed"]
    assert asked["marks"] == expected_marks(answer_for(asked)["result"]["edits"][0])
    assert changed["lines"][0] == asked["lines"][0] + " # a comment"
    # nothing drawn for an older state of the buffer
    assert changed["shown"] is None or changed["shown"]["tick"] == changed["tick"]
    assert changed["marks"] == [] or changed["shown"] is not None


def test_the_screen_as_a_picture(next_edit_run: dict[str, Any], tmp_path: Path):
    """The tmux screen with the suggestion: the replaced word in DgLspNextEditDelete's colours,
    the new one after it in DgLspNextEditInsert's. DG_UPDATE_PICTURES=1 writes the PNG to
    docs/img/ for the READMEs."""
    if "shown" not in next_edit_run:
        pytest.skip("no suggestion (test_a_rename_gets_a_suggestion says why)")
    if not next_edit_run["tmux"]:
        pytest.skip("tmux is not installed (apt-get install tmux)")
    (edit,) = next_edit_run["tried"][-1]["answer"]["result"]["edits"]
    start, end = edit["range"]["start"], edit["range"]["end"]
    assert start["line"] == end["line"] and "\n" not in edit["text"]
    row = next_edit_run["screen"]["screen"][end["line"]]
    deleted = row[start["character"]:end["character"]]
    inserted = row[end["character"]:end["character"] + len(edit["text"])]
    plain = row[:start["character"]] + row[end["character"] + len(edit["text"]):]
    assert "".join(ch for ch, _ in inserted) == edit["text"]
    deleted_styles = {style for _, style in deleted}
    inserted_styles = {style for _, style in inserted}
    plain_styles = {style for ch, style in plain if ch != " "}
    assert len(deleted_styles) == 1 and len(inserted_styles) == 1
    assert len({*deleted_styles, *inserted_styles} | plain_styles) == len(plain_styles) + 2

    image_module = pytest.importorskip("PIL.Image", reason="Pillow is not installed "
                                       "(pip install pillow: the picture only)")
    if not (FONTS / "DejaVuSansMono.ttf").exists():
        pytest.skip("DejaVu Sans Mono is not installed (apt-get install fonts-dejavu-core)")
    path = tmp_path / PICTURE.name
    screen = next_edit_run["screen"]
    render_png(screen["screen"], screen["cursor"], path, bar=False)  # normal mode: a block
    assert path.stat().st_size < 60_000
    assert image_module.open(path).size[0] > COLUMNS * 8
    if os.environ.get("DG_UPDATE_PICTURES") == "1":
        PICTURE.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(path, PICTURE)
