"""Waiting for a condition instead of sleeping a fixed time: a fixed sleep is too short on a
busy machine and wasted time on an idle one."""

from __future__ import annotations

import asyncio
import inspect
import time
from collections.abc import Awaitable, Callable
from typing import TypeVar

T = TypeVar("T")


def wait_for(condition: Callable[[], T], timeout: float = 60.0, what: str = "the condition",
             interval: float = 0.02) -> T:
    """condition()'s first true value, asked every `interval` seconds; AssertionError when
    `timeout` seconds pass without one."""
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(interval)


async def wait_for_async(condition: Callable[[], T | Awaitable[T]], timeout: float = 60.0,
                         what: str = "the condition", interval: float = 0.01) -> T:
    """wait_for inside an event loop, which keeps running meanwhile; the condition may be
    awaitable (a request to the server under test)."""
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if inspect.isawaitable(value):
            value = await value
        if value:
            return value
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(interval)
