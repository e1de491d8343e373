"""The language server's engine: loaded on first use, restarted when lost, its state told.

The engine loads on the server's one worker thread (the engine is not thread-safe) while the
client sees LSP work-done progress and a `dg-lsp/engineState` notification. A resident engine
that dies or refuses is dropped and started again; requests get empty answers meanwhile (ghost
text has no error UI).

An outage is told once: the first failure (a model that cannot load, an engine that cannot be
reached or that died) shows one window/showMessage and one "unavailable" state; until an
engine loads again, each request retries quietly (no popup, no progress, no state change) and
its failure goes to window/logMessage, a repeat of the same failure at most once a minute.
Only an engine lost after it came back, or another engine named in the settings, is news.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from concurrent.futures import Executor
from typing import Any, Protocol

from lsprotocol import types

from dg_lsp.engines import open_backend
from dg_lsp.lsp.progress import LoadProgress
from dg_lsp.settings import Settings
from engine.backend import Backend, CountingBackend, Counts, StepsOnWorker
from engine.serve.socket.client import EngineUnavailable

# Server → client notification {"state": "loading" | "ready" | "unavailable", "message": str}
# for status bars; sent whenever the engine's state changes.
ENGINE_STATE_NOTIFICATION = "dg-lsp/engineState"
# The same failure is logged again at most this often (seconds) while an outage lasts.
REPEAT_LOG_EVERY = 60.0


class EngineOwner(Protocol):
    """What the host reads of the language server (dg_lsp.lsp.state.DgLanguageServer is one):
    a protocol, so that this module needs nothing from the server, which builds on it."""

    settings: Settings
    executor: Executor  # the engine's one worker thread
    protocol: Any  # pygls's protocol: notifications, the client's capabilities
    work_done_progress: Any  # pygls's progress reporter (dg_lsp.lsp.progress)

    def log(self, message: str, kind: types.MessageType = types.MessageType.Log) -> None: ...

    def window_show_message(self, params: types.ShowMessageParams) -> None: ...


class EngineHost:
    def __init__(self, server: EngineOwner, backend: Backend | None = None) -> None:
        self.server = server
        self._backend = backend
        self._injected = backend is not None  # a test's engine: never dropped or replaced
        self._loading: asyncio.Task | None = None
        self._outage_told = False  # this outage's popup was shown; cleared when an engine loads
        self._failures = FailureLog()
        self.counts = Counts()  # every engine's requests and drafts, restarts included

    def stepped(self, backend: Backend) -> Backend:
        """`backend` as a request runs it, from a thread of its own: counted into the server's
        counts, each denoising pass on the server's one worker (StepsOnWorker)."""
        return StepsOnWorker(CountingBackend(backend, self.counts), self.server.executor)

    def settings_changed(self, old: Settings, new: Settings) -> None:
        """Drop the engine when the settings name another one (it loads on next use)."""
        if _engine_named(new) != _engine_named(old):
            if not self._injected:
                self._backend, self._loading = None, None
            self._outage_told = False  # another engine: its failure is news

    async def backend(self) -> Backend | None:
        """The engine, loaded on first use; None while it cannot be loaded."""
        if self._backend is not None:
            return self._backend
        if self._loading is None:
            self._loading = asyncio.ensure_future(self._load())
        return await asyncio.shield(self._loading)

    async def _load(self) -> Backend | None:
        server = self.server
        what = server.settings.model or "bundled model"
        # A retry during an outage the user was told of is quiet: no spinner, no state, no
        # popup at every keystroke; only its success is shown.
        quiet = self._outage_told
        if not quiet:
            self.state("loading", f"loading {what}")
        # The load starts at once; the client's answer to the progress token (up to
        # CREATE_TIMEOUT for one that never answers) must not delay the first completion.
        loading = asyncio.get_running_loop().run_in_executor(server.executor, self.open)
        progress = LoadProgress(server)
        if not quiet:
            await progress.begin(f"loading {what}")
        try:
            backend = await loading
        except Exception as exc:  # a missing or broken checkpoint must not kill the server
            progress.end("cannot load the model")
            self._loading = None
            if isinstance(exc, EngineUnavailable):  # a team's engine or the resident one
                self.failed(f"the engine is unavailable: {exc}", f"engine unavailable: {exc}")
            else:
                self.failed(f"cannot load the model: {exc}", f"model failed to load: {exc}",
                            types.MessageType.Error)
            return None
        except BaseException:  # cancelled (shutdown): the editor must not keep a spinner
            progress.end("stopped")
            raise
        self._backend = backend
        self._outage_told = False
        self._failures = FailureLog()
        where = backend.engine_info.device
        progress.end(f"ready on {where}")
        server.log(f"model loaded: {what} on {where} ({server.settings.engine} engine)")
        self.state("ready", f"{what} on {where}")
        return backend

    def open(self) -> Backend:
        """The engine the settings name (`open_backend`). Runs on the worker thread."""
        return open_backend(self.server.settings)

    def lost(self, exc: Exception, backend: Backend | None = None) -> None:
        """The resident engine died or refused: drop it, start it again, tell the user once.

        `backend` is the engine the failed request used; when it is no longer the current
        one, an earlier request already reported it (requests queued on a dying engine fail
        one after another) and a fresh engine must not be dropped for it."""
        if self._injected or (backend is not None and backend is not self._backend):
            return
        self._backend, self._loading = None, None
        self.failed("the engine stopped; restarting it", f"engine unavailable: {exc}",
                    types.MessageType.Warning, state=f"engine stopped: {exc}")
        asyncio.ensure_future(self.backend())

    def failed(self, message: str, log: str,
               kind: types.MessageType = types.MessageType.Warning,
               state: str | None = None) -> None:
        """One failure of an outage: `log` logged (repeats rate-limited); the first of the
        outage also shows `message` to the user and is sent as the "unavailable" state."""
        line = self._failures.line(log)
        if line is not None:
            self.server.log(line, kind)
        if self._outage_told:
            return
        self._outage_told = True
        self.server.window_show_message(types.ShowMessageParams(kind, f"dg-lsp: {message}"))
        self.state("unavailable", state or message)

    def state(self, state: str, message: str) -> None:
        self.server.protocol.notify(ENGINE_STATE_NOTIFICATION,
                                    {"state": state, "message": message})


def _engine_named(settings: Settings) -> tuple:
    """What chooses the engine: a change to any of it loads the engine again."""
    return (settings.model, settings.device, settings.dtype, settings.engine,
            settings.engine_token_file)


class FailureLog:
    """Which failures go to the log: a new one at once, a repeat of the last one at most every
    REPEAT_LOG_EVERY seconds, with the number of repeats left out since."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._last: str | None = None
        self._logged_at = 0.0
        self._left_out = 0

    def line(self, failure: str) -> str | None:
        """The log line for `failure`, or None when it is a repeat to leave out."""
        now = self._clock()
        if failure == self._last and now - self._logged_at < REPEAT_LOG_EVERY:
            self._left_out += 1
            return None
        line = failure
        if failure == self._last and self._left_out:
            line = f"{failure} (repeated {self._left_out} times since last logged)"
        self._last, self._logged_at, self._left_out = failure, now, 0
        return line
