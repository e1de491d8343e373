"""A team's engine endpoint without Ray, for tests of the clients that reach one by URL.

The real front door (engine.serve.team.front: the deployment's token check, before anything else
is read) in front of a small stand-in for the Ray Serve ingress behind it, which answers
`/v1/hello` and `/v1/stream` as engine.serve.team.app does: a hello of engine.serve.socket.protocol,
then one "result" line per request with a scripted completion, naming the replica that served
it. Every request body that got through is kept, so a test sees what a client sent (its
"document" included); every connection the front accepted is counted, so a test sees that
nothing was sent at all.

Replicas and their loss, for batch mode's retries: a request goes to its document's home
among the live `replicas` (engine.serve.team.routing, as the Ray router ranks them); `lose(r)`
makes the replica fail what it is sent next ("unavailable", as the ingress answers for a
replica lost mid-request) and drops it from the live ones at that failure, as Ray Serve's
router does. `faults` fail the next requests, one each, in arrival order (FAULTS: what a
client meets when a replica or the proxy in front of it is lost, or the engine is busy).
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from engine.serve.socket import protocol
from engine.serve.team.front import Front
from engine.serve.team.remote import reply_line
from engine.serve.team.routing import rank, routing_key
from engine.types import Draft

# How a request can fail: "reset" (the connection closed with no answer), "midstream" (one
# draft, then the connection closed), "http503" (Ray Serve's proxy with no replica to take it:
# not the engine's own JSON), "unavailable" (the ingress: the replica was lost mid-request),
# "busy" (the replica's queue is full), "failed" (the model raised: not worth sending again).
FAULTS = ("reset", "midstream", "http503", "unavailable", "busy", "failed")


@dataclass
class TeamEngine:
    url: str
    texts: list[str]  # the completions the replica writes, in order (the last one repeats)
    requests: list[dict[str, Any]] = field(default_factory=list)  # /v1/stream bodies
    connections: int = 0  # accepted by the front, authorized or not
    write: Callable[[dict[str, Any]], str] | None = None  # the completion, else from `texts`
    replicas: list[str] = field(default_factory=lambda: ["r1"])  # live, in no set order
    faults: list[str] = field(default_factory=list)  # the next requests' failures (FAULTS)
    lost: set[str] = field(default_factory=set)  # replicas that fail their next request
    served: list[tuple[str, str]] = field(default_factory=list)  # (document, replica) answered
    failed: list[tuple[str, str]] = field(default_factory=list)  # (document, fault) of others

    def lose(self, replica: str) -> None:
        self.lost.add(replica)

    def hello(self) -> dict[str, Any]:
        return {"type": "hello", "id": None, "version": protocol.VERSION, "model": "team-model",
                "device": "cuda:0", "family": "masked", "completion_ends": [0], "replicas": 2}

    def route(self, message: dict[str, Any]) -> tuple[str, str]:
        """(the replica the request goes to, its fault or "")."""
        replica = rank(routing_key(message), self.replicas)[0]
        document = str(message.get("document", ""))
        if replica in self.lost:  # it died: this request fails, the router forgets it
            self.lost.discard(replica)
            self.replicas.remove(replica)
            self.failed.append((document, "unavailable"))
            return replica, "unavailable"
        fault = self.faults.pop(0) if self.faults else ""
        if fault:
            self.failed.append((document, fault))
        return replica, fault

    def answer(self, message: dict[str, Any], replica: str = "r1") -> dict[str, Any]:
        if self.write is not None:
            text = self.write(message)
        else:
            text = self.texts.pop(0) if len(self.texts) > 1 else self.texts[0]
        self.served.append((str(message.get("document", "")), replica))
        draft = Draft(step=2, token_ids=[7, 8, 0], committed=3, text=text, done=True,
                      finish_reason="stop")
        return {**protocol.draft_message("result", message.get("id"), draft),
                "replica": replica}


class CountingFront(Front):
    def __init__(self, team: TeamEngine, *args: Any) -> None:
        super().__init__(*args)
        self.team = team

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.team.connections += 1
        await super().handle(reader, writer)


async def _ingress(team: TeamEngine, reader: asyncio.StreamReader,
                   writer: asyncio.StreamWriter) -> None:
    head = await reader.readuntil(b"\r\n\r\n")
    request_line = head.split(b"\r\n", 1)[0].decode()
    method, path, _ = request_line.split(" ", 2)
    length = next((int(line.split(b":")[1]) for line in head.split(b"\r\n")
                   if line.lower().startswith(b"content-length:")), 0)
    body = await reader.readexactly(length)
    status = b"200 OK"
    if method == "GET" and path.endswith("/v1/hello"):
        reply = json.dumps(team.hello()).encode()
    elif method == "POST" and path.endswith("/v1/stream"):
        message = protocol.decode(body)
        team.requests.append(message)
        replica, fault = team.route(message)
        if fault == "reset":
            writer.close()
            return
        if fault == "midstream":
            draft = Draft(step=1, token_ids=[7], committed=1, text="x", done=False)
            reply = reply_line({**protocol.draft_message("draft", message.get("id"), draft),
                                "replica": replica})
        elif fault == "http503":
            status, reply = b"503 Service Unavailable", b"no healthy replicas"
        elif fault:
            reply = reply_line({"type": "error", "id": message.get("id"), "code": fault,
                                "message": f"scripted {fault}"})
        else:
            reply = reply_line(team.answer(message, replica))
    else:
        reply = b'{"type": "error", "code": "unknown-op", "message": "no such path"}'
    writer.write(b"HTTP/1.1 " + status + b"\r\nContent-Type: application/x-ndjson\r\n"
                 b"Connection: close\r\n\r\n" + reply)
    await writer.drain()
    writer.close()


@contextlib.contextmanager
def team_engine(token: str, *texts: str) -> Iterator[TeamEngine]:
    """A team's engine on a loopback port (http://127.0.0.1:PORT), in a thread of its own,
    that takes `token` and writes `texts`."""
    loop = asyncio.new_event_loop()
    ready = threading.Event()
    box: dict[str, Any] = {}
    team = TeamEngine("", list(texts) or ["a + b"])

    async def main() -> None:
        up = await asyncio.start_server(lambda r, w: _ingress(team, r, w), "127.0.0.1", 0)
        digest = hashlib.sha256(token.encode()).hexdigest()
        front = CountingFront(team, ("127.0.0.1", up.sockets[0].getsockname()[1]), digest)
        server = await front.start("127.0.0.1", 0)
        team.url = f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}"
        box["stop"] = asyncio.Event()
        ready.set()
        await box["stop"].wait()
        server.close()
        up.close()
        others = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
        for task in others:
            task.cancel()
        await asyncio.gather(*others, return_exceptions=True)

    thread = threading.Thread(target=loop.run_until_complete, args=(main(),), daemon=True)
    thread.start()
    assert ready.wait(10)
    try:
        yield team
    finally:
        loop.call_soon_threadsafe(box["stop"].set)
        thread.join(10)
        loop.close()
