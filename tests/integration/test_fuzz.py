"""Seeded LSP fuzzing over stdio: random and mutated messages and documents.

Documents carry binary bytes, lone surrogates, every odd line break, very long lines; edits
carry ranges anywhere; requests carry params mutated field by field; some frames are not JSON
or not JSON-RPC; settings arrive with one value mutated. Every request must get a response (a
result or a JSON-RPC error), the server must stay within a memory bound and log no traceback,
and a normal completion must work afterwards. Broken headers and lengths are tested one by one
in test_robustness.py; here every frame is well framed, so that an unanswered request can only
be the server's fault.
"""

from __future__ import annotations

import random
import time
from pathlib import Path

import pytest

from tests.support.lsp_wire import WireServer, dumps, frame

SEEDS = (21, 2, 7)
MESSAGES = 200  # per seed
SMALL_HOLES = {"holeSize": {"restOfLine": 3, "brackets": 3, "comment": 3, "block": 3}}
ODD = ["\n", "\r\n", "\r", "\x0b", "\x0c", "\x1c", "\x1d", "\x1e", "\x85", "\u2028", "\u2029",
       "\x00", "\ud800", "\udfff", "🎉", "é", "\t", "(", "{", "#", '"']
WEIRD = [None, -1, 2**31, 2**63, 1.5, float("nan"), "7:10", "", [], {}, True, "\ud800",
         [1, 2], {"line": 0}]


def random_text(rng: random.Random) -> str:
    pieces = []
    for _ in range(rng.randint(0, 40)):
        roll = rng.random()
        if roll < 0.5:
            pieces.append(rng.choice(["def f(x):", "    return x", "y = ", "import os",
                                      "class A:", "    pass", "print(", "x[0]", "s = '"]))
        elif roll < 0.8:
            pieces.append(rng.choice(ODD))
        elif roll < 0.95:
            pieces.append("".join(chr(rng.randint(0, 0xFF)) for _ in range(rng.randint(1, 30))))
        else:
            pieces.append(rng.choice("x(,") * rng.randint(10_000, 200_000))  # a very long line
    return "".join(pieces)


def position(rng: random.Random) -> dict:
    return {"line": rng.choice([0, 0, 1, 2, 3, 10, 10_000]),
            "character": rng.choice([0, 1, 2, 5, 40, 100_000])}


def mutate(rng: random.Random, value: object) -> object:
    """The value with one field (at any depth) replaced, removed, or the whole replaced."""
    if isinstance(value, dict) and value and rng.random() < 0.8:
        key = rng.choice(list(value))
        out = dict(value)
        if rng.random() < 0.2:
            del out[key]
        else:
            out[key] = mutate(rng, value[key])
        return out
    return rng.choice(WEIRD)


class Fuzzer:
    def __init__(self, server: WireServer, seed: int) -> None:
        self.server, self.rng = server, random.Random(seed)
        self.uris: list[str] = []
        self.pending: list[object] = []

    def uri(self) -> str:
        if self.uris and self.rng.random() < 0.9:
            return self.rng.choice(self.uris)
        return f"file:///tmp/fuzz/{self.rng.randint(0, 20)}.py"

    def request(self, method: str, params: object) -> None:
        if self.rng.random() < 0.4:
            params = mutate(self.rng, params)
        self.pending.append(self.server.request(method, params))

    def step(self) -> None:
        rng, roll = self.rng, self.rng.random()
        if roll < 0.15:
            uri = f"file:///tmp/fuzz/{rng.randint(0, 20)}.py"
            language = rng.choice(["python", "python", "javascript", "plaintext", ""])
            self.server.open(uri, random_text(rng), language)
            self.uris.append(uri)
        elif roll < 0.35:
            change = {"range": {"start": position(rng), "end": position(rng)},
                      "text": random_text(rng)[:200]}
            if rng.random() < 0.1:
                change = {"text": random_text(rng)}
            params = {"textDocument": {"uri": self.uri(), "version": rng.randint(2, 99)},
                      "contentChanges": [change]}
            if rng.random() < 0.3:
                params = mutate(rng, params)
            self.server.notify("textDocument/didChange", params)
        elif roll < 0.40:
            self.server.notify("textDocument/didClose", {"textDocument": {"uri": self.uri()}})
        elif roll < 0.65:
            self.request("textDocument/inlineCompletion", {
                "textDocument": {"uri": self.uri()}, "position": position(rng),
                "context": {"triggerKind": 1}})
        elif roll < 0.75:
            self.request("textDocument/completion", {
                "textDocument": {"uri": self.uri()}, "position": position(rng)})
        elif roll < 0.85:
            self.request("textDocument/codeAction", {
                "textDocument": {"uri": self.uri()}, "context": {"diagnostics": []},
                "range": {"start": position(rng), "end": position(rng)}})
        elif roll < 0.88:
            self.request("codeAction/resolve", {"title": "t", "data": {
                "uri": self.uri(), "version": 1, "action": "rewrite",
                "range": {"start": position(rng), "end": position(rng)}}})
        elif roll < 0.90:
            # the fuzz's own settings with one value mutated: every WEIRD value is refused or
            # harmless, so completions stay as small as SMALL_HOLES makes them
            settings = {**SMALL_HOLES, "canvasLength": 256,
                        "sampler": {"temperature": 0, "threshold": 0.9, "seed": 0}}
            self.server.notify("workspace/didChangeConfiguration",
                               {"settings": mutate(rng, settings)})
        elif roll < 0.92:
            self.request(rng.choice(["dg-lsp/unknown", "textDocument/hover", "$/weird"]),
                         {"textDocument": {"uri": self.uri()}})
        elif roll < 0.96:
            # well framed, but not JSON: its error has no id to wait for
            body = bytes(rng.randint(0, 255) for _ in range(rng.randint(1, 60)))
            self.server.send_bytes(frame(body))
        else:
            msg_id = self.server.new_id()
            message = mutate(rng, {"jsonrpc": "2.0", "id": msg_id, "method": "shutdown"})
            if isinstance(message, dict) and message.get("id") == msg_id and \
                    message.get("method") != "shutdown":
                self.pending.append(msg_id)  # still a request with our id: it must be answered
            if not (isinstance(message, dict) and message.get("method") == "shutdown"):
                self.server.send_bytes(frame(dumps(message)))


@pytest.fixture(scope="module")
def fuzzed(dream_ckpt: Path):
    server = WireServer(dream_ckpt, SMALL_HOLES)
    yield server
    server.close()


@pytest.mark.slow  # 600 messages through a server and the model: about 40 s on the shared 2 cores
def test_every_request_is_answered_memory_stays_bounded_and_completion_works(fuzzed):
    server = fuzzed
    started = time.monotonic()
    baseline = server.rss_mb()
    unanswered = []
    for seed in SEEDS:
        fuzzer = Fuzzer(server, seed)
        for i in range(MESSAGES):
            fuzzer.step()
            if len(fuzzer.pending) >= 10 or i == MESSAGES - 1:  # a backlog, as editors have
                for msg_id in fuzzer.pending:
                    answer = server.response(msg_id, timeout=60)
                    if "result" not in answer and "error" not in answer:
                        unanswered.append(msg_id)
                fuzzer.pending.clear()
    assert unanswered == []
    assert server.proc.poll() is None
    # documents of up to a few hundred kB come and go: the server's memory must not keep them
    assert server.rss_mb() < baseline + 400, (baseline, server.rss_mb())
    fuzzed_stats = server.call("workspace/executeCommand", {"command": "dg-lsp.stats"})
    assert fuzzed_stats["result"]["engineRequests"] > 20  # the fuzz reached the model

    uri = "file:///tmp/fuzz/normal.py"
    server.open(uri, "def add(a, b):\n    return a + b\n\nx = add(")
    before = fuzzed_stats["result"]
    answer = server.inline(uri, 3, 8)
    assert isinstance(answer["result"]["items"], list)
    after = server.call("workspace/executeCommand", {"command": "dg-lsp.stats"})["result"]
    assert after["engineRequests"] == before["engineRequests"] + 1  # it reached the engine
    errors = server.stderr()
    assert "Traceback" not in errors, errors[-3000:]
    assert time.monotonic() - started < 120
