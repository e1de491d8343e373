"""The life of a request that runs the model unasked (inline completion, next edit): the same
for every such kind, so each handler only says what it computes.

- A newer request of the same kind for the same document cancels the older one: the user
  moved on, its answer would be pointless.
- It waits out the debounce (`debounceMs`) first: a keystroke during it cancels it before
  the engine is asked anything.
- An engine lost meanwhile (EngineUnavailable) is dropped and restarted by the host, which
  tells the user; the request gets the empty answer.
- Any other failure is the empty answer too, logged for the user who looks: nobody asked for
  these by hand, and ghost text has no error UI. The server keeps serving.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Awaitable, Callable
from typing import TypeVar

from lsprotocol import types

from dg_lsp.lsp.state import DgLanguageServer
from engine.backend import Backend
from engine.serve.socket.client import EngineUnavailable

log = logging.getLogger(__name__)

T = TypeVar("T")


class Run:
    """What a request's work gets from its life: the engine, and the flag that stops it."""

    def __init__(self, server: DgLanguageServer) -> None:
        self.server = server
        self.stop = threading.Event()  # set when the request is cancelled
        # The engine this request runs on, held for its whole life: the host may drop the
        # server's (engine lost) while the request waits for the worker.
        self.backend: Backend | None = None

    async def engine(self) -> Backend | None:
        """The server's engine as a request runs it from a thread of its own (each pass on
        the engine's worker, counted); None while it cannot be loaded."""
        self.backend = await self.server.engine.backend()
        if self.backend is None:
            return None
        return self.server.engine.stepped(self.backend)


async def run_request(server: DgLanguageServer, kind: str, uri: str, empty: T,
                      work: Callable[[Run], Awaitable[T]]) -> T:
    """`work`'s answer to a request of `kind` ("completion", "next edit") about `uri`, run
    through the life above; `empty` when it fails."""
    key = f"{kind} {uri}"
    inflight = server.inflight
    previous = inflight.get(key)
    if previous is not None and not previous.done():
        previous.cancel()
    task = asyncio.current_task()
    assert task is not None
    inflight[key] = task
    run = Run(server)
    try:
        if server.settings.debounce_ms:
            await asyncio.sleep(server.settings.debounce_ms / 1000)
        return await work(run)
    except EngineUnavailable as exc:
        server.engine.lost(exc, run.backend)
        return empty
    except asyncio.CancelledError:
        run.stop.set()
        server.stats["cancelled"] += 1
        raise
    except Exception as exc:  # noqa: BLE001 - a failed request must not surface
        log.exception("%s in %s failed", kind, uri)
        server.log(f"{kind} failed: {type(exc).__name__}: {exc}", types.MessageType.Error)
        return empty
    finally:
        if inflight.get(key) is task:
            del inflight[key]
