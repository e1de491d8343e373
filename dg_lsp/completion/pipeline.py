"""The one completion path: context → engine → post-processing → (text, range).

inlineCompletion, completion and `dg-lsp complete` all call `Pipeline`; they differ only in
how they wait for the engine (`complete` blocks; `complete_async` is awaited, so a cancelled
request stops at the next denoising pass).

The confidence gate hides what the model is unsure of (dg_lsp.document.gate) from requests
nobody made by hand; a request the user made (`asked`: an editor's explicit key or command)
gets what the model wrote all the same, marked `below_gate` with its confidence. What is not
shown says why (`Hidden`): the editors tell the user ("unsure (0.12)") rather than stay silent.

Each request names the hole kind's unit (the line of a rest-of-line hole, the dedent that ends
a block: `postprocess.unit_end`) and the engine stops once the committed text holds its end
(engine.text.units): what the editor would show can no longer change, and the hole's remaining
positions would cost passes for text that is cut away. In process or resident, the engine
runs the same passes.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import closing
from dataclasses import dataclass, field, replace

from dg_lsp.completion.cache import CompletionCache
from dg_lsp.completion.judge import judge
from dg_lsp.completion.postprocess import Suggestion, postprocess, unit_end
from dg_lsp.context import Context, OtherDocument, build_context, char_budget
from dg_lsp.document import gate
from dg_lsp.repository.candidates import line_tokens
from dg_lsp.repository.retrieve import RepositoryContext
from dg_lsp.settings import Settings
from dg_lsp.syntax.languages import LanguageSpec
from engine.backend import Backend
from engine.types import Draft, InfillRequest, last_draft


@dataclass
class CompletionRequest:
    text: str  # the whole document
    offset: int  # cursor, in characters (code points) of `text`
    language: LanguageSpec | None
    uri: str = ""
    other_documents: Sequence[OtherDocument] = field(default_factory=tuple)
    # The workspace index as this document reads it; None: none (not built yet, no workspace)
    repository: RepositoryContext | None = None
    # The lines of the latest edits of other open documents (dg_lsp.lsp.repository)
    recent_edits: Sequence[OtherDocument] = field(default_factory=tuple)


@dataclass
class Completion:
    text: str  # replaces text[start:end]
    start: int
    end: int
    kind: str  # the hole kind, or "cached"
    steps: int = 0  # denoising forward passes (0 when served from the cache)
    confidence: float | None = None  # the gate's probability it is close to right; None: unscored
    below_gate: bool = False  # shown only because it was asked for: the gate would hide it


@dataclass
class Picked(Draft):
    """A candidate the judge picked (dg_lsp.completion.judge), as the hole's last draft."""

    probability: float = 0.0  # the judge's: that it is exactly right
    # A pick the judge is not sure of: the model's own writing, shown instead where the gate
    # shows it (Judge.sure).
    written: Draft | None = None


@dataclass(frozen=True)
class Hidden:
    """No completion to show, and why: the user reads `reason` in the editor's status."""

    reason: str  # "unsure (0.12)", "nothing usable", "cancelled"
    confidence: float | None = None


def unsure(confidence: float) -> str:
    return f"unsure ({confidence:.2f})"


class Pipeline:
    def __init__(
        self,
        backend: Backend,  # the in-process Engine or the resident engine's client
        settings: Settings | None = None,
        cache: CompletionCache | None = None,
    ) -> None:
        self.backend = backend
        self.settings = settings or Settings()
        self.cache = cache if cache is not None else CompletionCache()
        # The last post-processed draft: a chosen text is checked before it is kept, then
        # decided on, and is post-processed (parsed) once.
        self._shaped: tuple[str, Context, Suggestion | None] | None = None

    def suggestion(self, raw: str, ctx: Context) -> Suggestion | None:
        """postprocess(raw, ctx), computed once for the same draft."""
        if self._shaped is None or self._shaped[0] != raw or self._shaped[1] is not ctx:
            self._shaped = (raw, ctx, postprocess(raw, ctx))
        return self._shaped[2]

    def context(self, request: CompletionRequest) -> Context:
        hole = max(self.settings.hole_size.values())
        budget = char_budget(self.settings.canvas_length, hole)
        others = request.other_documents if self.settings.extra_context else ()
        on = self.settings.repository_context
        return build_context(request.text, request.offset, request.language, budget,
                             self.settings.suffix_fraction, others,
                             request.repository if on else None,
                             request.recent_edits if on else ())

    def start(
        self, request: CompletionRequest, cancel: Callable[[], bool] | None = None
    ) -> tuple[Context, Iterator[Draft]]:
        """The context, and the engine's drafts (lazy: nothing runs until iterated)."""
        ctx = self.context(request)
        # What the engine is asked, decided here once and carried unchanged to the decoder.
        ask = InfillRequest(ctx.prefix, ctx.suffix, self.settings.hole_size[ctx.kind],
                            self.settings.sampler, self.settings.canvas_length,
                            self.settings.suffix_fraction, until=unit_end(ctx))
        return ctx, self._drafts(ask, ctx, cancel, request.uri or None)

    def _drafts(self, ask: InfillRequest, ctx: Context, cancel: Callable[[], bool] | None,
                document: str | None) -> Iterator[Draft]:
        """The engine's drafts of the hole. Where the file or the repository holds texts at
        the cursor's place (Context.candidates), the engine scores them all with its first
        pass (InfillRequest.judge) and the judge (dg_lsp.completion.judge) picks one, or
        none: then the model goes on writing the hole from that pass."""
        if ctx.candidates:
            ask = replace(ask, choices=tuple(c.text for c in ctx.candidates), judge=True)
        unsure: Picked | None = None  # a pick that yields to the model's own writing
        line_start = gate.is_line_start(ctx.line_prefix, ctx.kind)
        with closing(self.backend.infill_stream(ask, cancel, document=document)) as drafts:
            for draft in drafts:
                judged = draft.choice_logprobs or (ctx.candidates and draft.step == 1)
                if judged and draft.finish_reason != "cancelled":
                    picked = self._pick(ctx, draft, line_start)
                    if picked is not None and judge().sure(picked.probability, line_start):
                        # closing() tells the engine to stop after the pass in flight.
                        yield picked
                        return
                    unsure = picked
                if unsure is not None and draft.done and draft.finish_reason != "cancelled":
                    yield replace(unsure, step=draft.step, written=draft)
                    return
                yield draft

    def _pick(self, ctx: Context, first: Draft, line_start: bool) -> Picked | None:
        """The judge's pick among the candidates, from the `first` draft's scores, as the
        hole's last draft, or None."""
        picked = judge().pick(ctx.candidates, first.choice_logprobs, line_start,
                              first.top_logprobs, line_tokens(ctx.line_prefix))
        if picked is None or self.suggestion(picked[0].text, ctx) is None:
            return None
        return Picked(step=1, token_ids=[], committed=0, text=picked[0].text, done=True,
                      finish_reason="judged", probability=picked[1])

    def decide(self, request: CompletionRequest, ctx: Context, last: Draft | None,
               asked: bool = False) -> Completion | Hidden:
        """The completion to show for the engine's `last` draft, or why there is none."""
        if last is None or last.finish_reason == "cancelled":
            return Hidden("cancelled")
        if isinstance(last, Picked) and last.written is not None:
            own = self.decide(request, ctx, last.written)
            if isinstance(own, Completion):
                return own
        suggestion = self.suggestion(last.text, ctx)
        if suggestion is None:
            return Hidden("nothing usable")
        if isinstance(last, Picked):
            confidence = last.probability
        else:
            repeated = suggestion.text in ctx.gate_repeats
            confidence = None if last.score is None else gate.confidence(
                last.score, ctx.kind, suggestion.text, repeated)
        line_start = gate.is_line_start(ctx.line_prefix, ctx.kind)
        below_gate = (judge().hides(confidence, line_start, self.settings.min_confidence)
                      if isinstance(last, Picked) else
                      gate.hides(confidence, self.settings.min_confidence, line_start))
        if below_gate and not asked:
            return Hidden(unsure(confidence), confidence)
        self.cache.put(request.uri, request.text, request.offset, suggestion)
        return Completion(suggestion.text, request.offset, request.offset + suggestion.replace,
                          ctx.kind, last.step, confidence, below_gate)

    def finish(
        self, request: CompletionRequest, ctx: Context, last: Draft | None
    ) -> Completion | None:
        """The completion an editor shows unasked for the engine's `last` draft, or None."""
        decided = self.decide(request, ctx, last)
        return decided if isinstance(decided, Completion) else None

    def complete(
        self, request: CompletionRequest, cancel: Callable[[], bool] | None = None
    ) -> Completion | None:
        """Blocking: for the command line and tests. The cache first, then the engine."""
        hit = cached_completion(self.cache, request)
        if hit is not None:
            return hit
        ctx, drafts = self.start(request, cancel)
        return self.finish(request, ctx, last_draft(drafts))

    async def complete_async(self, request: CompletionRequest, asked: bool = False
                             ) -> Completion | Hidden:
        """The engine's completion, awaited while its drafts are read on a thread of their
        own: the backend says where each pass runs (the server's run on the engine's one
        worker: engine.backend.StepsOnWorker). The cache is the caller's to look up first
        (the server does, before it waits for an engine).

        A cancelled task gets CancelledError at the await; the engine is told to stop, and its
        stream is closed, after the pass in flight.
        """
        stop = threading.Event()
        ctx, drafts = self.start(request, stop.is_set)
        try:
            last = await asyncio.get_running_loop().run_in_executor(
                None, last_draft, drafts, stop.is_set)
        finally:
            stop.set()
        return self.decide(request, ctx, last, asked)


def cached_completion(cache: CompletionCache, request: CompletionRequest) -> Completion | None:
    """What the cache holds for the request: a suggestion the user is typing through."""
    hit = cache.get(request.uri, request.text, request.offset)
    if hit is None:
        return None
    return Completion(hit.text, request.offset, request.offset + hit.replace, "cached")
