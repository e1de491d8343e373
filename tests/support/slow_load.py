"""`dg-lsp serve` with a slow model load, as `python -c` runs it: the progress tests and VS Code's
window test."""

from __future__ import annotations

# The server as `python -c` runs it (or a script, tests/e2e/test_vscode_window.py): the same CLI,
# with a slow load ($DG_TEST_LOAD_SECONDS, default 0.5) and frequent reports.
SLOW_LOAD = """
import os, sys, time
from dg_lsp import cli
from dg_lsp.lsp import engine_host, progress
progress.REPORT_EVERY = 0.1
open_engine = engine_host.EngineHost.open
def slow_open(self):
    time.sleep(float(os.environ.get("DG_TEST_LOAD_SECONDS", "0.5")))
    return open_engine(self)
engine_host.EngineHost.open = slow_open
sys.exit(cli.main(sys.argv[1:]))
"""
