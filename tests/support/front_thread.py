"""A team engine's front (engine.serve.team.front) on a loopback port, in a thread of its own,
as `dg-engine serve --ray` runs it in front of Ray Serve's proxy."""

from __future__ import annotations

import asyncio
import contextlib
import ssl
import threading
from collections.abc import Iterator

from engine.serve.team.front import Front


@contextlib.contextmanager
def front_in_thread(front: Front, port: int, tls: ssl.SSLContext | None = None
                    ) -> Iterator[None]:
    """`front` listening on 127.0.0.1:`port` until the block ends."""
    loop = asyncio.new_event_loop()
    ready = threading.Event()
    stop: list[asyncio.Event] = []

    async def main() -> None:
        server = await front.start("127.0.0.1", port, tls)
        stop.append(asyncio.Event())
        ready.set()
        await stop[0].wait()
        server.close()
        others = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
        for task in others:  # connections left open
            task.cancel()
        await asyncio.gather(*others, return_exceptions=True)

    thread = threading.Thread(target=loop.run_until_complete, args=(main(),), daemon=True)
    thread.start()
    assert ready.wait(10), "the front did not start"
    try:
        yield
    finally:
        loop.call_soon_threadsafe(stop[0].set)
        thread.join(10)
        loop.close()
