"""Fuzz the engine's wire: a few hundred seeded random and mutated frames to one engine over
its Unix socket. Each gets a strict-JSON reply or a clean close, the engine's memory stays
bounded, nothing reaches its log as a traceback, and a normal infill afterwards gives the
completion it gave before."""

from __future__ import annotations

import json
import random
import socket
import struct
import time
from pathlib import Path
from typing import Any

from engine.serve.socket import protocol
from tests.support.engine_procs import rss_mb, serving

SEED = 21
FRAMES = 400
OPS = ["ping", "hello", "stats", "cancel", "infill", "rewrite", "fly"]  # never "shutdown"
TERMINAL = {"ok", "hello", "result", "error"}
CODES = {"bad-request", "unknown-op", "too-large", "busy", "unauthorized", "version", "failed"}
NORMAL = {"op": "infill", "id": "normal", "prefix": "def f(x):\n    return ", "suffix": "\n",
          "max_tokens": 12, "canvas_length": 128}


def random_value(rng: random.Random, depth: int = 0) -> Any:
    kind = rng.choice(["int", "bigint", "float", "str", "bool", "null", "list", "dict"]
                      if depth < 3 else ["int", "float", "str", "null"])
    if kind == "int":
        return rng.randint(-600, 600)
    if kind == "bigint":
        return rng.choice([-1, 1]) * rng.randint(2**31, 2**70)
    if kind == "float":
        return rng.choice([0.5, -0.0, 1e-320, 1e308, -1e308, rng.uniform(-2, 2)])
    if kind == "str":
        alphabet = "ab x=\n\t\\\"'\u00e9\u2028\u0085\x00\U0001f600\ud800"
        return "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 12)))
    if kind == "bool":
        return rng.random() < 0.5
    if kind == "null":
        return None
    if kind == "list":
        return [random_value(rng, depth + 1) for _ in range(rng.randint(0, 4))]
    return {random_value(rng, 3) if rng.random() < 0.3 else rng.choice(list(NORMAL)):
            random_value(rng, depth + 1) for _ in range(rng.randint(0, 4))}


def valid_request(rng: random.Random, i: int) -> dict[str, Any]:
    op = rng.choice(OPS)
    request: dict[str, Any] = {"op": op, "id": i}
    if op in ("infill", "rewrite"):
        canvas = rng.choice([32, 64, 128])
        request |= {"prefix": "x = ", "suffix": "\n", "max_tokens": rng.randint(1, 16),
                    "canvas_length": canvas, "stream": rng.random() < 0.5,
                    "settings": {"sampler": rng.choice(["topk", "threshold", "entropy"])}}
        if op == "rewrite":
            request |= {"original": "1 + 2", "strength": 0.5}
        elif rng.random() < 0.3:  # a next edit's word: one of these or nothing
            request["choices"] = [" y\n", " total\n", "\n"]
    if op == "cancel":
        request["target"] = rng.randint(0, i)
    return request


def mutated(rng: random.Random, i: int) -> bytes:
    request = valid_request(rng, i)
    how = rng.choice(["field", "drop", "settings", "id", "text", "flip", "cut", "deep"])
    if how == "field":
        request[rng.choice(list(NORMAL) + ["op", "strength", "original", "stream",
                                           "choices"])] = (
            random_value(rng))
    elif how == "drop" and len(request) > 1:
        del request[rng.choice(list(request))]
    elif how == "settings":
        name = rng.choice(["k", "threshold", "temperature", "seed", "max_steps",
                           "cache_refresh", "refresh_window", "eos_penalty", "sampler", "bogus"])
        request["settings"] = {name: random_value(rng)}
    elif how == "id":
        request["id"] = random_value(rng)
    body = json.dumps(request).encode()  # ensure_ascii: lone surrogates travel as \ud800
    if how == "text":  # what json.dumps never writes, but a peer may
        token = rng.choice([b"NaN", b"Infinity", b"-Infinity", b"1e999", b"9" * 5000])
        body = body.replace(b'"id": ' + str(i).encode(), b'"id": ' + token, 1)
        if b"max_tokens" in body:
            body = body.replace(b'"max_tokens": ', b'"max_tokens": ' + token + b", \"x\": ", 1)
    elif how == "flip":
        at = rng.randrange(len(body))
        body = body[:at] + bytes([body[at] ^ (1 << rng.randrange(8))]) + body[at + 1:]
    elif how == "cut":
        body = body[: rng.randrange(len(body))]
    elif how == "deep":
        depth = rng.choice([10, 1000, 50_000])
        body = b'{"op": "ping", "id": 1, "x": ' + b"[" * depth + b"]" * depth + b"}"
    return body


def random_frame(rng: random.Random, i: int) -> bytes:
    roll = rng.random()
    if roll < 0.15:
        return bytes(rng.randrange(256) for _ in range(rng.randint(0, 64)))
    if roll < 0.3:
        return json.dumps(random_value(rng)).encode()
    if roll < 0.45:
        return json.dumps(valid_request(rng, i)).encode()
    return mutated(rng, i)


class Peer:
    """One connection to the engine, opened again after the engine closes it."""

    def __init__(self, endpoint) -> None:
        self.endpoint = endpoint
        self.sock: socket.socket | None = None
        self.closes = 0

    def exchange(self, body: bytes) -> list[dict]:
        """Send one frame; the engine's replies up to its final one ([] after a clean close).
        """
        if self.sock is None:
            self.sock = self.endpoint.connect(timeout=60)
        self.sock.sendall(struct.pack(">I", len(body)) + body)
        replies = []
        try:
            while True:
                reply = protocol.receive(self.sock)  # strict JSON, or ProtocolError
                replies.append(reply)
                if reply.get("type") in TERMINAL:
                    return replies
        except ConnectionError:
            self.sock.close()
            self.sock, self.closes = None, self.closes + 1
            return replies


def test_a_few_hundred_random_frames_each_get_an_answer_and_nothing_breaks(dream_ckpt: Path,
                                                                           tmp_path: Path):
    rng = random.Random(SEED)
    log = tmp_path / "engine.log"
    with serving(dream_ckpt, tmp_path / "e.sock", stderr=log) as (process, endpoint):
        peer = Peer(endpoint)
        normal = json.dumps(NORMAL).encode()
        before = peer.exchange(normal)[-1]
        assert before["type"] == "result"
        rss_before = rss_mb(process.pid)
        started = time.monotonic()
        answered = 0
        for i in range(1, FRAMES + 1):
            body = random_frame(rng, i)
            replies = peer.exchange(body)
            for reply in replies:
                assert reply.get("type") in TERMINAL | {"draft"}, (body[:200], reply)
                if reply["type"] == "error":
                    assert reply["code"] in CODES and isinstance(reply["message"], str)
            answered += bool(replies)
            assert time.monotonic() - started < 240, "the fuzz run is too slow"
        assert answered == FRAMES  # every frame got a reply (not one clean close)
        assert rss_mb(process.pid) - rss_before < 100
        assert peer.exchange(normal)[-1]["draft"] == before["draft"]
        with endpoint.connect(timeout=60) as sock:
            sock.sendall(struct.pack(">I", protocol.MAX_MESSAGE + 1))
            assert protocol.receive(sock)["code"] == "too-large"
        assert endpoint.alive()
    assert "Traceback" not in log.read_text()
