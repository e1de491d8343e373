"""An asked-for suggestion in a real Neovim 0.11, against a scripted server.

The server (pygls, fixed answers) plays the confidence gate: while typing (triggerKind 2,
Automatic) it hides its suggestion and says why in `dg-lsp/suggestion` ("unsure (0.12)");
asked for explicitly (triggerKind 1, Invoked) it answers with the suggestion and says it is
below the gate. It logs every textDocument/inlineCompletion it gets, so the test sees which
kind the plugin sent.

Headless Neovim (the plugin on the runtimepath) gets its keys through `nvim --server SOCKET
--remote-send`: `require("dg_lsp").status()` must say exactly why nothing is shown; the accept
key with nothing shown must ask with triggerKind 1, draw the answer as ghost text with its
confidence after it, and accept it on the next press. With `inline_completion = false` (as on
Neovim 0.7-0.9, which have no ghost text) the same key inserts the answer.
"""

from __future__ import annotations

import json
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

import pytest

from tests.support import nvim_harness as harness
from tests.support.nvim_harness import CAPTURE_LUA, nvim_command, nvim_or_skip, stop

pytestmark = pytest.mark.e2e  # a real Neovim, typed into

# Answers by the text before the cursor and the request's triggerKind (1 Invoked, 2
# Automatic), each followed by the notification the server sends after answering.
SCRIPTED_SERVER = '''
import asyncio, json, sys
from lsprotocol import types
from pygls.lsp.server import LanguageServer

LOG, SCRIPT = sys.argv[1], json.loads(sys.argv[2])
server = LanguageServer("scripted", "0")

@server.feature(types.INITIALIZED)
def initialized(ls, params):
    ls.protocol.notify("dg-lsp/engineState", {"state": "ready", "message": "scripted"})

@server.feature(types.TEXT_DOCUMENT_INLINE_COMPLETION)
def inline(ls, params):
    position = params.position
    line = ls.workspace.get_text_document(params.text_document.uri).lines[position.line]
    before = line[:position.character]
    kind = int(params.context.trigger_kind)
    with open(LOG, "a") as log:
        log.write(json.dumps({"triggerKind": kind, "before": before}) + "\\n")
    answer = SCRIPT.get(before, {}).get(str(kind))
    if answer is None:
        return types.InlineCompletionList(items=[])
    text = answer.get("text")
    note = {"uri": params.text_document.uri,
            "position": {"line": position.line, "character": position.character},
            "asked": kind == 1, "shown": text is not None,
            "belowGate": answer.get("belowGate", False),
            "confidence": answer.get("confidence"), "reason": answer.get("reason", "")}
    # after the answer, as the notification's protocol says
    asyncio.get_running_loop().call_soon(ls.protocol.notify, "dg-lsp/suggestion", note)
    items = [] if text is None else [types.InlineCompletionItem(
        insert_text=text, range=types.Range(position, position))]
    return types.InlineCompletionList(items=items)

server.start_io()
'''
SCRIPT = {
    "alpha": {"2": {"reason": "unsure (0.12)", "confidence": 0.12},
              "1": {"text": " = 1", "belowGate": True, "confidence": 0.12}},
    "gamma": {"2": {"reason": "nothing usable"}, "1": {"reason": "nothing usable"}},
}

SETUP_LUA = CAPTURE_LUA + """
local dg = require("dg_lsp")
dg.setup({ cmd = vim.fn.json_decode(vim.env.DG_CMD),
           inline_completion = vim.env.DG_INLINE == "1" })
vim.cmd("edit " .. vim.env.DG_FILE)

DgTest = {}
function DgTest.state()
  local buf = vim.api.nvim_get_current_buf()
  local ghost, marker = vim.NIL, vim.NIL
  for _, mark in ipairs(vim.api.nvim_buf_get_extmarks(buf, dg.ghost_namespace, 0, -1,
                                                      { details = true })) do
    local details = mark[4]
    local drawn = { row = mark[2], text = text_of(details.virt_text),
                    hl = details.virt_text[1][2], pos = details.virt_text_pos }
    if details.virt_text_pos == "eol" then marker = drawn else ghost = drawn end
  end
  local client = dg.client(buf)
  return vim.json.encode({
    mode = vim.api.nvim_get_mode().mode, lines = vim.api.nvim_buf_get_lines(buf, 0, -1, false),
    cursor = vim.api.nvim_win_get_cursor(0), ghost = ghost, marker = marker,
    status = dg.status(), notes = out.notes,
    attached = client ~= nil and client.initialized == true,
  })
end
"""


def scripted_session(tmp_path_factory: pytest.TempPathFactory, name: str, inline: bool,
                     source_text: str, steps) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """A Neovim 0.11 against the scripted server; `steps(neovim, run)` types and records.
    Returns what it recorded and the requests the server got, in order."""
    nvim = nvim_or_skip("wheel")
    tmp = tmp_path_factory.mktemp(name)
    source, server, log = tmp / "scripted.py", tmp / "server.py", tmp / "requests.jsonl"
    source.write_text(source_text)
    server.write_text(SCRIPTED_SERVER)
    socket = tempfile.mkdtemp(prefix="dg-nvim-") + "/nvim.sock"  # short: sun_path is 108 bytes
    command = json.dumps([sys.executable, str(server), str(log), json.dumps(SCRIPT)])
    # DG_CMD replaces the dg-lsp command: no model is loaded (the model argument is unused)
    proc, neovim = harness.start_neovim(nvim, tmp, tmp, source, nvim_command(nvim, socket, tmp),
                                        socket, SETUP_LUA, DG_CMD=command,
                                        DG_INLINE="1" if inline else "0")
    run: dict[str, Any] = {"error": None}
    try:
        steps(neovim, run)
    except TimeoutError as exc:
        run["error"] = str(exc)
    finally:
        stop(proc)
        shutil.rmtree(Path(socket).parent, ignore_errors=True)
    requests = [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []
    return run, requests


def ghost_steps(neovim: harness.Neovim, run: dict[str, Any]) -> None:
    neovim.keys("1GA")
    neovim.wait("insert mode", lambda s: s["mode"] == "i")
    neovim.keys("alpha")
    run["hidden"] = neovim.wait("the reason", lambda s: s["status"] == "dg-lsp: unsure (0.12)")
    neovim.keys("<M-l>")  # nothing shown: ask
    run["asked"] = neovim.wait("the ghost text and its marker",
                               lambda s: s["ghost"] is not None and s["marker"] is not None)
    neovim.keys("<M-l>")  # shown: accept
    run["accepted"] = neovim.wait("accepted", lambda s: s["lines"][0] != "alpha")
    neovim.keys("<Esc>2GA")
    neovim.wait("insert mode on line 2", lambda s: s["mode"] == "i" and s["cursor"][0] == 2)
    neovim.keys("gamma")
    run["nothing"] = neovim.wait("the reason", lambda s: s["status"] == "dg-lsp: nothing usable")
    neovim.keys("<M-l>")
    run["nothing_asked"] = neovim.wait("the message", lambda s: s["notes"] != [])


@pytest.fixture(scope="module")
def ghost_run(tmp_path_factory: pytest.TempPathFactory
              ) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    return scripted_session(tmp_path_factory, "nvim-asked", True, "\n\n", ghost_steps)


def test_a_hidden_suggestion_says_why_in_status(ghost_run):
    run, _ = ghost_run
    assert run["error"] is None, run["error"]
    hidden = run["hidden"]
    assert hidden["status"] == "dg-lsp: unsure (0.12)" and hidden["lines"][0] == "alpha"
    assert hidden["ghost"] is None and hidden["marker"] is None and hidden["notes"] == []


def test_the_accept_key_asks_and_draws_the_answer_with_its_confidence(ghost_run):
    run, requests = ghost_run
    assert run["error"] is None, run["error"]
    asked = run["asked"]
    assert asked["lines"][0] == "alpha"  # drawn, not inserted
    assert asked["ghost"] == {"row": 0, "text": " = 1", "hl": "DgLspGhost", "pos": "inline"}
    assert asked["marker"] == {"row": 0, "text": " 0.12", "hl": "DgLspConfidence", "pos": "eol"}
    assert asked["status"] == "dg-lsp: 0.12 (asked)"
    invoked = [r for r in requests if r["triggerKind"] == 1]
    assert invoked == [{"triggerKind": 1, "before": "alpha"},
                       {"triggerKind": 1, "before": "gamma"}]
    assert {"triggerKind": 2, "before": "alpha"} in requests  # typing asked too, gated


def test_the_next_press_accepts_it_and_the_status_is_the_engines_again(ghost_run):
    run, _ = ghost_run
    assert run["error"] is None, run["error"]
    accepted = run["accepted"]
    assert accepted["lines"][0] == "alpha = 1" and accepted["cursor"] == [1, 9]
    assert accepted["ghost"] is None and accepted["marker"] is None
    assert accepted["status"] == "dg-lsp: ready"  # an edit since


def test_asked_for_and_nothing_usable_says_so(ghost_run):
    run, _ = ghost_run
    assert run["error"] is None, run["error"]
    assert run["nothing"]["status"] == "dg-lsp: nothing usable"
    assert run["nothing"]["lines"][1] == "gamma"
    nothing = run["nothing_asked"]
    assert nothing["notes"] == ["dg-lsp: nothing usable"]
    assert nothing["ghost"] is None and nothing["lines"][1] == "gamma"


def insert_steps(neovim: harness.Neovim, run: dict[str, Any]) -> None:
    neovim.keys("1GA")
    neovim.wait("insert mode", lambda s: s["mode"] == "i")
    neovim.keys("alpha<M-l>")
    run["inserted"] = neovim.wait("inserted", lambda s: s["status"] == "dg-lsp: 0.12 (asked)")


def test_without_ghost_text_the_accept_key_asks_and_inserts(
        tmp_path_factory: pytest.TempPathFactory):
    """As on Neovim 0.7-0.9: no ghost text, no request while typing."""
    run, requests = scripted_session(tmp_path_factory, "nvim-asked-insert", False, "\n",
                                     insert_steps)
    assert run["error"] is None, run["error"]
    inserted = run["inserted"]
    assert inserted["lines"][0] == "alpha = 1" and inserted["cursor"] == [1, 9]
    assert inserted["status"] == "dg-lsp: 0.12 (asked)"  # until the next edit
    assert inserted["notes"] == []
    assert requests == [{"triggerKind": 1, "before": "alpha"}]
