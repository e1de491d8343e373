"""The model's loading as LSP work-done progress, which editors show on their own.

Loading a 7B checkpoint takes from seconds to minutes, and the first completion waits for it.
Editors show server-initiated progress without any plugin code (VS Code's LanguageClient in
the status bar, Neovim ≥ 0.10 in `vim.lsp.status()` and `LspProgress`), so the server
reports it: `window/workDoneProgress/create`, then `$/progress` begin, a report every
REPORT_EVERY seconds with the time so far (the load is one call into the engine: there is no
percentage to give, but a changing message shows the server is alive), and end with the
outcome. A client that did not declare `window.workDoneProgress`, or that refuses or does
not answer the create request, gets none of it; the load goes on regardless.
"""

from __future__ import annotations

import asyncio
import logging
import uuid

from lsprotocol import types
from pygls.lsp.server import LanguageServer

log = logging.getLogger(__name__)

TITLE = "dg-lsp"
REPORT_EVERY = 2.0  # seconds
CREATE_TIMEOUT = 5.0  # seconds a client has to accept the token before loading goes on


class LoadProgress:
    """One load's progress: `await begin(message)`, then `end(message)` exactly once."""

    def __init__(self, server: LanguageServer) -> None:
        self._server = server
        self._token = str(uuid.uuid4())
        self._ticker: asyncio.Task | None = None
        self._started = False

    async def begin(self, message: str) -> None:
        if not _client_shows_progress(self._server):
            return
        progress = self._server.work_done_progress
        try:
            await asyncio.wait_for(progress.create_async(self._token), CREATE_TIMEOUT)
        except Exception as exc:  # refused, unanswered: the spec says to send nothing then
            log.info("no work-done progress: %s", exc or type(exc).__name__)
            return
        self._started = True
        progress.begin(self._token, types.WorkDoneProgressBegin(title=TITLE, message=message))
        self._ticker = asyncio.ensure_future(self._report(message))

    async def _report(self, message: str) -> None:
        loop = asyncio.get_running_loop()
        start = loop.time()
        while True:
            await asyncio.sleep(REPORT_EVERY)
            seconds = round(loop.time() - start)
            self._server.work_done_progress.report(
                self._token, types.WorkDoneProgressReport(message=f"{message} ({seconds} s)"))

    def end(self, message: str) -> None:
        if self._ticker is not None:
            self._ticker.cancel()
        if self._started:
            self._started = False
            progress = self._server.work_done_progress
            progress.end(self._token, types.WorkDoneProgressEnd(message=message))
            progress.tokens.pop(self._token, None)  # pygls keeps every token otherwise


def _client_shows_progress(server: LanguageServer) -> bool:
    # pygls sets the capabilities at initialize; a load before it must not fail on their absence
    caps = getattr(server.protocol, "client_capabilities", None)
    return bool(caps and caps.window and caps.window.work_done_progress)
