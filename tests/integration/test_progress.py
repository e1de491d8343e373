"""The model's loading reaches the editor as LSP work-done progress (dg_lsp/lsp/progress.py).

`dg-lsp serve` on stdio with the raw client of tests/support/lsp_wire.py, which records every
message
the server sends, in order. The load is made slow (half a second) and the report interval short
(0.1 s) in the server process, so that reports are sent while it loads.
"""

from __future__ import annotations

from pathlib import Path

from tests.support.lsp_wire import WireServer
from tests.support.slow_load import SLOW_LOAD

PROGRESS_CAPS = {"window": {"workDoneProgress": True}}


def progress_messages(wire: WireServer) -> list[tuple[str, object, dict]]:
    """(method, token, value) of the create requests and $/progress notifications, in order."""
    out = []
    for message in wire.received:
        if message["method"] == "window/workDoneProgress/create":
            out.append((message["method"], message["params"]["token"], {}))
        elif message["method"] == "$/progress":
            params = message["params"]
            out.append((message["method"], params["token"], params["value"]))
    return out


def load(wire: WireServer) -> dict:
    """The first completion request, which loads the model; its response."""
    wire.open("file:///tmp/p.py", "def f(x):\n    return \n")
    return wire.inline("file:///tmp/p.py", 1, 11, timeout=120)


def test_loading_is_created_begun_reported_and_ended_in_order(dream_ckpt: Path):
    wire = WireServer(dream_ckpt, capabilities=PROGRESS_CAPS, python_args=("-c", SLOW_LOAD))
    try:
        assert "result" in load(wire)
        messages = progress_messages(wire)
        methods = [method for method, _, _ in messages]
        kinds = [value.get("kind") for _, _, value in messages]
        assert methods[0] == "window/workDoneProgress/create"
        assert kinds[1] == "begin" and kinds[-1] == "end"
        reports = kinds[2:-1]
        assert reports and set(reports) == {"report"}, kinds  # 0.5 s at 0.1 s: a few
        assert len({token for _, token, _ in messages}) == 1  # one token throughout
        begin, end = messages[1][2], messages[-1][2]
        assert begin["title"] == "dg-lsp"
        assert begin["message"] == f"loading {dream_ckpt}"
        assert messages[2][2]["message"].startswith(f"loading {dream_ckpt} (")
        assert end["message"] == "ready on cpu"
        # the editor's status bar hears "ready" after the progress ended, never before
        states = [m for m in wire.received if m["method"] in ("$/progress", "dg-lsp/engineState")]
        assert states[-1]["params"] == {"state": "ready", "message": f"{dream_ckpt} on cpu"}

        # loaded once: a second request reports nothing more
        count = len(wire.received)
        assert "result" in wire.inline("file:///tmp/p.py", 1, 11)
        assert not [m for m in wire.received[count:] if "progress" in m["method"].lower()]
    finally:
        wire.close()


def test_a_model_that_cannot_load_ends_its_progress_with_the_failure(tmp_path: Path):
    wire = WireServer(tmp_path / "missing", capabilities=PROGRESS_CAPS)
    try:
        assert "result" in load(wire)  # an empty answer; the failure is shown as a message
        messages = progress_messages(wire)
        kinds = [value.get("kind") for _, _, value in messages]
        assert kinds[:2] == [None, "begin"] and set(kinds[2:-1]) <= {"report"}
        assert kinds[-1] == "end"  # no spinner left behind
        assert messages[-1][2]["message"] == "cannot load the model"
    finally:
        wire.close()


def test_a_client_without_the_capability_gets_no_progress(dream_ckpt: Path):
    wire = WireServer(dream_ckpt)
    try:
        assert "result" in load(wire)
        assert progress_messages(wire) == []
        states = [m["params"]["state"] for m in wire.received
                  if m["method"] == "dg-lsp/engineState"]
        assert states == ["loading", "ready"]  # the status bar is told all the same
    finally:
        wire.close()
