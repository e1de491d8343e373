"""A raw LSP client over a server's stdio: sends any bytes, reads frames in a thread.

pytest-lsp's client validates what it sends; these tests need to send what no well-behaved
client would (broken headers, invalid params), and to see exactly what comes back.
"""

from __future__ import annotations

import json
import os
import queue
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any


def frame(body: bytes | str) -> bytes:
    data = body.encode("utf-8", "surrogatepass") if isinstance(body, str) else body
    return b"Content-Length: %d\r\n\r\n" % len(data) + data


def dumps(message: Any) -> str:
    # ensure_ascii keeps lone surrogates as \ud800 escapes, as a JavaScript client sends them
    return json.dumps(message, ensure_ascii=True, allow_nan=True)


class WireServer:
    def __init__(self, model: Path | None, options: dict | None = None,
                 env: dict[str, str] | None = None, capabilities: dict | None = None,
                 python_args: tuple[str, ...] = ("-m", "dg_lsp.cli"),
                 serve_args: tuple[str, ...] = (), root_uri: str | None = None) -> None:
        command = [sys.executable, *python_args, "serve", "--engine", "inproc", *serve_args]
        if model is not None:
            command += ["--model", str(model), "--device", "cpu"]
        self.log = tempfile.TemporaryFile()
        self.proc = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=self.log, env={**os.environ, **(env or {})})
        self.messages: queue.Queue[dict] = queue.Queue()
        self.notifications: list[dict] = []
        self.received: list[dict] = []  # the server's notifications and requests, in order
        self._answers: dict[Any, dict] = {}  # responses that came while waiting for another
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()
        self._next_id = 0
        self.call("initialize", {"processId": None, "rootUri": root_uri,
                                 "capabilities": capabilities or {},
                                 "initializationOptions": options})
        self.notify("initialized", {})

    def _read(self) -> None:
        out = self.proc.stdout
        while True:
            length = None
            while True:
                line = out.readline()
                if not line:
                    return
                if not line.strip():
                    break
                name, _, value = line.decode().partition(":")
                if name.lower() == "content-length":
                    length = int(value)
            self.messages.put(json.loads(out.read(length)))

    def send_bytes(self, data: bytes) -> None:
        self.proc.stdin.write(data)
        self.proc.stdin.flush()

    def send(self, message: Any) -> None:
        self.send_bytes(frame(dumps(message)))

    def notify(self, method: str, params: Any) -> None:
        self.send({"jsonrpc": "2.0", "method": method, "params": params})

    def new_id(self) -> int:
        self._next_id += 1
        return self._next_id

    def request(self, method: str, params: Any, msg_id: Any = None) -> Any:
        msg_id = self.new_id() if msg_id is None else msg_id
        self.send({"jsonrpc": "2.0", "id": msg_id, "method": method, "params": params})
        return msg_id

    def response(self, msg_id: Any, timeout: float = 60) -> dict:
        """The response to `msg_id` (in any order); notifications seen meanwhile are kept."""
        key = dumps(msg_id)
        if key in self._answers:
            return self._answers.pop(key)
        deadline = time.monotonic() + timeout
        while True:
            try:
                message = self.messages.get(timeout=max(0.01, deadline - time.monotonic()))
            except queue.Empty:
                raise AssertionError(f"no response to {msg_id!r} within {timeout} s") from None
            if "method" in message:
                self.received.append(message)
            if "method" in message and "id" not in message:
                self.notifications.append(message)
            elif "method" not in message and message.get("id") == msg_id:
                return message
            elif "method" not in message:
                self._answers[dumps(message.get("id"))] = message
            elif "method" in message:
                # a request from the server (progress, applyEdit): a plain null answers it
                self.send({"jsonrpc": "2.0", "id": message["id"], "result": None})

    def call(self, method: str, params: Any, timeout: float = 60) -> dict:
        return self.response(self.request(method, params), timeout)

    def open(self, uri: str, text: str, language: str = "python") -> None:
        self.notify("textDocument/didOpen", {"textDocument": {
            "uri": uri, "languageId": language, "version": 1, "text": text}})

    def inline(self, uri: str, line: int, character: int, timeout: float = 60,
               asked: bool = False) -> dict:
        """An inline completion request, sent while typing (Automatic) unless `asked` (Invoked:
        the user's explicit key or command, answered below the confidence gate too)."""
        return self.call("textDocument/inlineCompletion", {
            "textDocument": {"uri": uri}, "position": {"line": line, "character": character},
            "context": {"triggerKind": 1 if asked else 2}}, timeout)

    def rss_mb(self) -> float:
        status = Path(f"/proc/{self.proc.pid}/status").read_text()
        line = next(x for x in status.splitlines() if x.startswith("VmRSS:"))
        return int(line.split()[1]) / 1024

    def stderr(self) -> str:
        self.log.seek(0)
        return self.log.read().decode(errors="replace")

    def close(self) -> None:
        try:
            if self.proc.poll() is None:
                self.call("shutdown", None, timeout=10)
                self.notify("exit", None)
                self.proc.stdin.close()
                self.proc.wait(timeout=10)
        except (AssertionError, OSError, subprocess.TimeoutExpired):
            pass
        finally:
            if self.proc.poll() is None:
                self.proc.kill()
                self.proc.wait()
            self.log.close()


def apply_text_edits(text: str, edits: list[dict]) -> str:
    """`text` with the TextEdits of an LSP answer (JSON, UTF-16 positions of ASCII text)
    applied, last first."""
    lines = text.split("\n")
    offsets = [sum(len(line) + 1 for line in lines[:n]) for n in range(len(lines))]
    for edit in sorted(edits, key=lambda e: (e["range"]["start"]["line"],
                                            e["range"]["start"]["character"]), reverse=True):
        start = offsets[edit["range"]["start"]["line"]] + edit["range"]["start"]["character"]
        end = offsets[edit["range"]["end"]["line"]] + edit["range"]["end"]["character"]
        text = text[:start] + edit["newText"] + text[end:]
    return text
