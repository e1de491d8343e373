"""A rewrite that renames the definition it rewrites is refused over LSP with its reason, unless
the instruction asks for it (issue #32): `dg-lsp serve` with a scripted engine."""

from __future__ import annotations

import json

from tests.support.lsp_wire import WireServer

WORD_COUNT = '''def word_count(text):
    counts = {}
    for word in text.split():
        counts[word] = counts.get(word, 0) + 1
    return counts
'''
COUNTER = WORD_COUNT.rstrip("\n")


# `dg-lsp serve` whose engine writes the given text for every hole (argv[1], JSON).
SCRIPTED_SERVER = """
import json, sys
from dg_lsp.lsp.server import create_server
from tests.support.scripted import Scripted
texts = json.loads(sys.argv[1])
create_server(Scripted(*texts * 8)).start_io()
"""


def test_a_rename_is_refused_over_lsp_with_its_reason_unless_the_instruction_asks():
    renamed = COUNTER.replace("word_count", "read_lines")
    resolves = {"textDocument": {"codeAction": {"resolveSupport": {"properties": ["edit"]}}}}
    wire = WireServer(None, capabilities=resolves,
                      python_args=("-c", SCRIPTED_SERVER, json.dumps([renamed])))
    try:
        uri = "file:///tmp/words.py"
        wire.open(uri, WORD_COUNT)
        whole = {"start": {"line": 0, "character": 0}, "end": {"line": 5, "character": 0}}
        listed = wire.call("textDocument/codeAction", {
            "textDocument": {"uri": uri}, "range": whole, "context": {"diagnostics": []}})
        (action,) = [a for a in listed["result"] if a["title"] == "Rewrite selection"]
        refused = wire.call("codeAction/resolve", action)
        assert refused["error"]["message"] == (
            "dg-lsp: the model's version renames `word_count` to `read_lines`")

        def instructed(instruction: str) -> dict:
            """The command's answer; the edit it asks the client to apply is applied."""
            msg_id = wire.request("workspace/executeCommand", {
                "command": "dg-lsp.rewriteWithInstruction", "arguments": [{
                    "textDocument": {"uri": uri, "version": 1}, "range": whole,
                    "instruction": instruction, "strength": 1.0}]})
            for _ in range(100):  # a refused edit: no applyEdit comes, the answer does
                message = wire.messages.get(timeout=60)
                if message.get("id") == msg_id and "method" not in message:
                    return message
                if message.get("method") == "workspace/applyEdit":
                    wire.send({"jsonrpc": "2.0", "id": message["id"],
                               "result": {"applied": True}})
                elif "method" in message:
                    wire.notifications.append(message)
            raise AssertionError("no answer to the command")

        assert instructed("use collections.Counter")["result"] is None
        shown_messages = [m["params"]["message"] for m in wire.notifications
                          if m["method"] == "window/showMessage"]
        assert shown_messages[-1] == ("dg-lsp: the model's version renames `word_count` to "
                                      "`read_lines`")
        edit = instructed("rename it to read_lines")["result"]
        (change,) = edit["documentChanges"]
        assert [e["newText"] for e in change["edits"]] == [renamed]
    finally:
        wire.close()
