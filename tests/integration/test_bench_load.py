"""`dg-lsp bench --load`: the background load starts what it says and leaves nothing behind."""

from __future__ import annotations

import os
import shutil
import time

import pytest

from dg_lsp.measure.bench_load import BackgroundLoad


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


@pytest.mark.parametrize("kind", ["busy", "compile"])
def test_the_load_runs_while_measured_and_is_gone_after(kind: str):
    if kind == "compile" and shutil.which("cc") is None:
        pytest.skip("no C compiler")
    with BackgroundLoad(kind, 2) as load:
        pids = [p.pid for p in load._processes]
        assert len(pids) == 2 and all(_alive(pid) for pid in pids)
        time.sleep(0.3)
        assert all(p.poll() is None for p in load._processes)  # still running
    assert not any(_alive(pid) for pid in pids)

