"""Ports for the servers tests start."""

from __future__ import annotations

import random
import socket


def free_port() -> int:
    """A free port that Ray will not hand out meanwhile: the kernel's port 0 comes from the
    ephemeral range (32768 and up), where Ray's own processes also take ports as they start,
    so a port chosen that way was once taken before `dg-engine serve` bound it; Ray's workers
    take 10002-19999 (its default min/max worker ports). A port is handed out once per test
    session: two asked for before either is bound (a listen port and a serve port) were once
    the same."""
    for port in random.sample(range(20000, 32000), 200):
        if port in _HANDED_OUT:
            continue
        with socket.socket() as probe:
            try:
                probe.bind(("127.0.0.1", port))
            except OSError:
                continue
        _HANDED_OUT.add(port)
        return port
    raise OSError("no free port between 20000 and 32000")


_HANDED_OUT: set[int] = set()
