"""`Backend`: what dg-lsp asks of an engine, whether it runs in this process or not.

Two kinds implement it: `engine.Engine` (the model loaded in this process) and
`engine.serve.socket.client.WireBackend` (`EngineClient`: the resident engine over a socket;
`RemoteEngine`: a team's engine by URL). Both take the same request objects
(engine.types.InfillRequest, RewriteRequest). What differs
between them that a caller may need to know is written down in `EngineInfo`, never found
out by probing for attributes.

`document` names the document a request is about (an editor's URI, a file's path): transport
metadata beside the request, not part of it. An engine over a wire sends it (a digest:
engine.serve.socket.protocol.document_key) so a team's engine keeps one document on one replica;
an engine in this process has nothing to route and ignores it.

No torch here: `dg-lsp` types against this without loading a model.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from concurrent.futures import Executor
from dataclasses import dataclass
from typing import Protocol

from engine.types import Draft, HolesRequest, InfillRequest, RewriteRequest


@dataclass(frozen=True)
class EngineInfo:
    model: str  # the checkpoint folder or hub id ("" or the folder: the bundled model)
    family: str  # "masked", "ar" or "block" (engine.decode.families)
    device: str  # where the model runs: "cpu", "cuda:0", ...
    resident: bool  # a shared engine process serves it (EngineClient), not this process
    # Whether `completion_ids` can tell stop tokens apart: in process and resident always (a
    # resident engine says which ids end a completion in its hello); a stand-in may not.
    counts_tokens: bool


class Backend(Protocol):
    @property
    def engine_info(self) -> EngineInfo: ...

    def infill_stream(self, request: InfillRequest, cancel: Callable[[], bool] | None = None,
                      *, document: str | None = None) -> Iterator[Draft]:
        """Drafts of the request's hole after every forward pass; the last has done=True and
        a finish_reason ("unit" when it ended at `request.until`). `cancel` is asked between
        passes: once it says so, the last draft is "cancelled"."""
        ...

    def rewrite_stream(self, request: RewriteRequest, cancel: Callable[[], bool] | None = None,
                       *, document: str | None = None) -> Iterator[Draft]:
        """Drafts of `request.original` rewritten at `request.strength` (the share of its
        tokens generated again; 1.0: a fresh infill)."""
        ...

    def holes_stream(self, request: HolesRequest, cancel: Callable[[], bool] | None = None,
                     *, document: str | None = None) -> Iterator[Draft]:
        """Drafts of the request's holes, denoised jointly; each draft's `holes` holds every
        hole's committed text."""
        ...

    def completion_ids(self, draft: Draft) -> list[int]:
        """The draft's tokens before the first stop token or uncommitted position; only where
        `engine_info.counts_tokens`."""
        ...


@dataclass
class Counts:
    requests: int = 0
    drafts: int = 0
    steps: int = 0  # forward passes: each request's last draft's step
    tokens: int | None = 0  # completion tokens; None once a backend could not tell


class WrappedBackend:
    """A Backend that hands every request to `backend` and passes its drafts through `_wrap`
    (what a subclass adds: counting them, stepping them on a worker thread)."""

    def __init__(self, backend: Backend) -> None:
        self.backend = backend

    @property
    def engine_info(self) -> EngineInfo:
        return self.backend.engine_info

    def infill_stream(self, request: InfillRequest, cancel: Callable[[], bool] | None = None,
                      *, document: str | None = None) -> Iterator[Draft]:
        return self._wrap(self.backend.infill_stream(request, cancel, document=document))

    def rewrite_stream(self, request: RewriteRequest, cancel: Callable[[], bool] | None = None,
                       *, document: str | None = None) -> Iterator[Draft]:
        return self._wrap(self.backend.rewrite_stream(request, cancel, document=document))

    def holes_stream(self, request: HolesRequest, cancel: Callable[[], bool] | None = None,
                     *, document: str | None = None) -> Iterator[Draft]:
        return self._wrap(self.backend.holes_stream(request, cancel, document=document))

    def completion_ids(self, draft: Draft) -> list[int]:
        return self.backend.completion_ids(draft)

    def _wrap(self, drafts: Iterator[Draft]) -> Iterator[Draft]:
        return drafts


class CountingBackend(WrappedBackend):
    """A Backend that counts what passes through it into `counts` (its own, or one shared by
    several backends: the language server's engine may be replaced, its counts go on):
    requests, drafts, forward passes and completion tokens (None where the backend cannot
    tell stop tokens apart, see EngineInfo.counts_tokens)."""

    def __init__(self, backend: Backend, counts: Counts | None = None) -> None:
        super().__init__(backend)
        self.counts = counts if counts is not None else Counts()
        if not backend.engine_info.counts_tokens:
            self.counts.tokens = None

    @property
    def requests(self) -> int:
        return self.counts.requests

    @property
    def steps(self) -> int:
        return self.counts.steps

    @property
    def tokens(self) -> int | None:
        return self.counts.tokens

    def _wrap(self, drafts: Iterator[Draft]) -> Iterator[Draft]:
        counts = self.counts
        counts.requests += 1
        last = None
        for last in drafts:
            counts.drafts += 1
            yield last
        if last is not None:
            counts.steps += last.step
            if counts.tokens is not None:
                counts.tokens += len(self.backend.completion_ids(last))


class StepsOnWorker(WrappedBackend):
    """A Backend whose every denoising pass runs on `executor` (the engine's one worker: an
    engine in this process is not thread-safe), for drafts read on another thread: the passes
    of other requests interleave with its. A resident engine steps every request in its own
    process: its drafts are read on the calling thread (a hop to the worker per pass would
    only add latency)."""

    def __init__(self, backend: Backend, executor: Executor) -> None:
        super().__init__(backend)
        self.executor = executor

    def _wrap(self, drafts: Iterator[Draft]) -> Iterator[Draft]:
        if self.engine_info.resident:
            return drafts
        return self._stepped(drafts)

    def _stepped(self, drafts: Iterator[Draft]) -> Iterator[Draft]:
        try:
            while (draft := self.executor.submit(next, drafts, None).result()) is not None:
                yield draft
        finally:
            # Closed on the worker too: closing runs the engine's cleanup.
            self.executor.submit(drafts.close)  # type: ignore[attr-defined]
