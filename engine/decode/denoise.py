"""The masked family's denoiser: fill a canvas's hole in a few parallel steps.

Each step runs the model, proposes a token for every hole position and commits the ones the
sampler picks (engine.decode.samplers); committed tokens never change. A `MaskedDenoiser`
returns a `Draft` after every step; the last one has `done=True` and a `finish_reason`. The
runner (engine.decode.runner) steps it, alone or with other holes' full passes in one batch.
Which canvas rows a pass runs is engine.decode.passes; which tokens the hole may hold,
engine.decode.constraints; what a step commits besides the sampler's picks (the stop run,
early stop, DreamOn's edits, choices), engine.decode.hole.

Variable length. A stop token (EOS/pad) committed inside the hole ends the completion there:
every position after it becomes pad at once, so it costs no further steps. With
`stop_early=False` (the oracle-length protocol) stop tokens are forbidden and the hole is
filled completely. A DreamOn checkpoint (`config.expand_token_id`) edits the hole instead: a
position committed as expand becomes two masks while the canvas has room, and a position
committed as a stop token is deleted.

Every pass computes logits only for the hole's masked range (first to last masked
position): the vocabulary projection of the whole canvas is a large share of a full pass.

Context cache. A full pass keeps every position's keys/values. Later steps run only the
live span: the masked range plus, for models that shift logits, the token just before it
(its output fills the first masked position, and that output changes as the hole fills in,
so it must be a query again). The live span attends to the cached keys/values of every other
position, which went stale when the hole changed; every `cache_refresh` steps (R) a refresh
pass recomputes the hole and `refresh_window` tokens on each side of it (None: the whole
canvas, a full pass). R=1 is a full pass every step: exactly the uncached computation.
What goes stale is mostly the hole itself: a window of a few tokens keeps the edit
similarity of whole-canvas refreshes at a lower latency (docs/performance.md).
Positions committed since the last refresh, such as the run of pads that ends a
single-line hole, are seen as the masks they were until the next refresh; on held-out
single-line holes that is also what lets the bundled model write whole lines instead of
stopping after a token or two (docs/performance.md).

Steps without a pass. A pass that wrote the cache (full or refresh) is often followed by a
step whose cached pass would see nothing new: all that was committed since lies outside its
live span (the run of pads a first pass settles, or, unshifted, the first masked position),
and every position it does run reads as it did. Its logits would be the last pass's rows, so
the step commits from those (`advance`) and a completion takes fewer passes (docs/performance.md).
In float32 the commits are the same; int8 layers quantize their input per call, over the rows
of that call, so there the skipped pass would have rounded otherwise.

Across requests (R > 1 only). Typing changes the canvas near the cursor; the prefix before it
is mostly the same tokens as a moment ago. A `PrefixCache` (engine.decode.kv_cache) keeps recent
canvases' prefix keys/values keyed by token ids; a new request's first pass then runs only
from the first token that differs and attends to the cached rest. For a bidirectional model
those keys were computed beside an older hole and suffix, so this is the same approximation
as R > 1 and the next refresh (full pass) corrects it.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable

import torch
from torch import Tensor

from engine.decode.constraints import token_constraints
from engine.decode.hole import Hole, choose, edit_dreamon, follow_choices, stop_early, stop_run
from engine.decode.kv_cache import ContextCache, PrefixCache, first_positions, joined
from engine.decode.passes import hole_logits, live_span, logit_rows, rows_to_logits
from engine.decode.samplers import adjust_logits, step
from engine.models.config import ModelConfig
from engine.models.transformer import LayerKV, Transformer
from engine.text.canvas import Canvas, VocabText, completion_text
from engine.text.stops import completion_ids
from engine.text.tokenizer import Tokenizer
from engine.types import Draft, SamplerSettings, score_of


def _sync(device: torch.device) -> None:
    # Timings of asynchronous devices mean nothing without a sync.
    if device.type == "cuda":
        torch.cuda.synchronize(device)


# Told of every masked-family step's sampler input, before it commits: (logits of the masked
# range, which of its positions are masked, the settings, the stop ids, whether the context
# was refreshed). How engine.train.commit_policy records the model's trajectories.
StepObserver = Callable[[Tensor, Tensor, SamplerSettings, Tensor, bool], None]
STEP_OBSERVERS: list[StepObserver] = []


class MaskedDenoiser:
    """One hole being denoised, advanced one forward pass at a time.

    `step` runs its next pass alone; the runner (engine.decode.runner) runs the full passes of
    several holes as one padded batch instead (`full_pass_input` / `hole_from_full` /
    `advance`).
    """

    def __init__(
        self,
        model: Transformer,
        config: ModelConfig,
        tokenizer: Tokenizer,
        canvas: Canvas,
        settings: SamplerSettings,
        stop_ids: set[int],
        *,
        stop_early: bool = True,
        vocab: VocabText | None = None,
        timings: dict[str, float] | None = None,
        prefix_cache: PrefixCache | None = None,
        start: tuple[list[int], list[bool]] | None = None,
        passes_before: int = 0,
    ) -> None:
        """`stop_ids`: the tokens that end the completion (`Decoder.stop_ids`). `start`
        (tokens, committed flags) replaces the all-mask hole: a rewrite keeps the committed
        tokens and denoises the rest. `passes_before`: forward passes already run for this
        hole (a rewrite's scoring pass), counted in its drafts' steps."""
        if config.mask_token_id is None:
            raise ValueError("the model has no mask token")
        self.model, self.config, self.tokenizer, self.canvas = model, config, tokenizer, canvas
        self.settings = settings
        device = next(model.parameters()).device
        self.device = device
        self.timings = {} if timings is None else timings
        self.timings.setdefault("forward", 0.0)
        self.timings.setdefault("sample", 0.0)
        self.stop_ids = stop_ids
        # Built once: the stop-run rule and min_tokens index by them at every step.
        self.stop_list = sorted(self.stop_ids)
        self.stop_tensor = torch.tensor(self.stop_list, dtype=torch.long, device=device)
        pad = config.pad_token_id
        self.pad_id = pad if pad is not None else config.eos_token_id
        self.expand_id = config.expand_token_id
        # A hole of fixed length follows its choices position by position (engine.text.choices);
        # DreamOn's hole changes length, so it keeps their tokens only.
        self.choices = canvas.choices if self.expand_id is None else None
        self.constraints = token_constraints(
            config, canvas, model.cfg.vocab_size, device, stop_ids, stop_early=stop_early,
            vocab=vocab, follows_choices=self.choices is not None)
        self.generator = torch.Generator(device=device).manual_seed(settings.seed)
        self.refresh = max(1, settings.cache_refresh)
        self.prefix_cache = (prefix_cache if self.refresh > 1 and settings.share_prefix
                             else None)
        self.hole = Hole(canvas, device)
        if start is not None:
            self.hole.rebuild(*start)
        self.cache: ContextCache | None = None
        self.stale = True  # the cache no longer matches the canvas layout
        self.stopped = False
        self.steps = 0
        # Steps whose logits were a row slice of an earlier pass's, not a pass of their own
        # (`advance`): the drafts count forward passes, steps - reused.
        self.reused = 0
        # Whether the pass whose logits `advance` gets next wrote the cache it read (a full
        # pass or a refresh): then the passes after it may reuse its logits.
        self._wrote_cache = False
        self.passes_before = passes_before
        self._masked_range: tuple[int, int] | None = None  # this step's; advance() clears it

    @property
    def done(self) -> bool:
        return self.hole.n == 0 or not bool(self.hole.masked().any())

    def draft(self, done: bool = False, reason: str = "") -> Draft:
        tokens = self.hole.tokens()
        committed = self.hole.committed.tolist()
        settled = next((i for i, c in enumerate(committed) if not c), len(committed))
        ids = completion_ids(tokens[:settled], self.stop_ids)
        text = completion_text(self.canvas, self.tokenizer.decode(ids))
        passes = self.passes
        sampled = [c for c in self.hole.confidence[: len(ids)].tolist() if not math.isnan(c)]
        return Draft(step=passes, token_ids=tokens, committed=sum(committed), text=text,
                     done=done, finish_reason=reason, score=score_of(sampled, passes))

    @property
    def passes(self) -> int:
        """Forward passes run for this hole (and before it: `passes_before`)."""
        return self.steps - self.reused + self.passes_before

    def final(self, reason: str | None = None) -> Draft:
        """The last Draft: `reason` given (cancelled), or how the hole ended."""
        return self.draft(True, reason or ("stop" if self.stopped else "length"))

    def step(self) -> Draft:
        """Run this hole's next forward pass alone and commit from it; the new Draft."""
        if self.done:
            return self.final()
        t0 = time.perf_counter()
        logits = self.forward()
        _sync(self.device)
        self.timings["forward"] += time.perf_counter() - t0
        return self.advance(logits)

    def close(self) -> None:
        """Nothing to release: its tensors go with it."""

    def batchable(self) -> bool:
        """Whether its next pass may run in a batch with other holes' (a plain full pass)."""
        return not self.done and self.full_pass_next() and not self.reuses_prefix()

    def full_pass_input(self) -> tuple[Tensor, tuple[int, int]]:
        """What a batched full pass needs of this hole: its canvas ids [S] and the canvas
        rows it reads logits of (`hole_from_full` then takes its own)."""
        return self.hole.x, self.logit_rows()

    def full_pass_next(self) -> bool:
        """Whether the next step runs the whole canvas (else the live span, cached)."""
        if self.refresh == 1 or self.stale:
            return True
        return self.refresh_next() and self.settings.refresh_window is None

    def refresh_next(self) -> bool:
        """Whether the next step refreshes the cache (a full pass, or a windowed one)."""
        return self.steps % self.refresh == 0

    def masked_range(self) -> tuple[int, int]:
        """Hole positions [lo, hi), first masked to last: the rows a step reads and samples.

        Committed positions around them need no logits, and a cached pass need not run them
        (a trailing run of committed pads is most of a single-line hole). Read once a step
        (forward, then advance): it syncs with the device."""
        if self._masked_range is None:
            idx = self.hole.masked().nonzero()
            self._masked_range = (0, 0) if idx.numel() == 0 else (int(idx[0]), int(idx[-1]) + 1)
        return self._masked_range

    def _span(self) -> tuple[int, int]:
        lo, hi = self.masked_range()
        return self.hole.start + lo, self.hole.start + hi

    def logit_rows(self) -> tuple[int, int]:
        """Canvas rows a full pass must compute logits for."""
        return logit_rows(*self._span(), self.model.cfg.shift_logits)

    def hole_from_full(self, raw: Tensor, kv: list[LayerKV], offset: int = 0) -> Tensor:
        """Logits of the hole's masked range (rows lo..hi-1 of `masked_range`) from a full
        pass: raw logits [1, r, V] of canvas rows offset.. (covering `logit_rows`), keys/values
        of every position. Keeps the cache when R > 1."""
        p0, p1 = self._span()
        shifted = self.model.cfg.shift_logits
        r0, r1 = logit_rows(p0, p1, shifted)
        if self.refresh > 1:
            self.cache, self.stale = ContextCache(kv, self.hole.x.shape[0]), False
            self._wrote_cache = True
        return rows_to_logits(raw[0, r0 - offset : r1 - offset], p0, p1, shifted)

    def reuses_prefix(self) -> bool:
        """Whether the next pass starts from another request's cached prefix."""
        return self.prefix_cache is not None and self.steps == 0

    def forward(self) -> Tensor:
        """Run this hole's next forward pass alone; the logits of its masked range."""
        with torch.inference_mode():
            if self.reuses_prefix():
                return self._first_pass_from_prefix_cache()
            if self.full_pass_next():
                rows = self.logit_rows()
                raw, kv = self.model(self.hole.x[None], logit_rows=rows)
                return self.hole_from_full(raw, kv, offset=rows[0])
            if not self.refresh_next():
                logits, _ = hole_logits(self.model, self.hole.x, self._span(), self.cache)
                return logits
            return self._windowed_refresh()

    def _windowed_refresh(self) -> Tensor:
        """The live span and `refresh_window` positions around it recomputed, their new
        keys/values kept; the hole's logits."""
        window = max(0, self.settings.refresh_window or 0)
        span = self._span()
        live = live_span(*span, self.model.cfg.shift_logits, window, self.hole.x.shape[0])
        logits, kv = hole_logits(self.model, self.hole.x, span, self.cache, live)
        self.cache = self.cache.refreshed(live, kv)
        self._wrote_cache = True
        return logits

    def _first_pass_from_prefix_cache(self) -> Tensor:
        hole, model = self.hole, self.model
        ids = hole.x[: hole.start].tolist()
        reuse, past = self.prefix_cache.lookup(ids)
        reuse = min(reuse, hole.start - 1)  # the token before the hole stays a query
        r0, r1 = self.logit_rows()
        if past is None or reuse < PrefixCache.MIN_REUSE:
            reuse = 0
            raw, kv = model(hole.x[None], logit_rows=(r0, r1))
        else:
            past = first_positions(past, reuse)
            device = hole.x.device
            positions = torch.arange(reuse, hole.x.shape[0], device=device)[None]
            raw, new = model(hole.x[None, reuse:], positions, past,
                             torch.arange(reuse, device=device)[None],
                             logit_rows=(r0 - reuse, r1 - reuse))
            kv = joined(past, new)
        self.prefix_cache.store(ids, first_positions(kv, hole.start, copy=True))
        return self.hole_from_full(raw, kv, offset=r0)

    def advance(self, logits: Tensor) -> Draft:
        """Commit what the sampler picks from this step's logits (of the masked range, as
        `forward` and `hole_from_full` return them); the new Draft.

        After a pass that wrote the cache, the next cached pass sees nothing new when all
        that was committed since lies outside its live span: the trailing pads of a
        single-line hole, or the first masked position, which it reads from the cache as the
        mask it was. That pass would return these same logits for its rows, so its step
        commits from them at once instead ("Steps without a pass" above)."""
        t1 = time.perf_counter()
        reusable, self._wrote_cache = self._wrote_cache, False
        first = self.masked_range()[0]
        before = self.hole.committed.clone()
        self._commit(logits)
        while reusable and not self.done and self._sees_nothing_new(self.hole.committed & ~before):
            lo, hi = self.masked_range()
            self.reused += 1
            self._commit(logits[lo - first : hi - first])
        _sync(self.device)
        self.timings["sample"] += time.perf_counter() - t1
        done = self.done
        return self.draft(done, ("stop" if self.stopped else "length") if done else "")

    def _sees_nothing_new(self, changed: Tensor) -> bool:
        """Whether the next step runs a cached pass none of the hole positions `changed`
        is a query of (each reads as it was when the cache was written)."""
        if self.expand_id is not None or self.full_pass_next() or self.refresh_next():
            return False
        a, b = live_span(*self.masked_range(), self.model.cfg.shift_logits)
        return not bool(changed[a:b].any())

    def _commit(self, logits: Tensor) -> None:
        """One step: commit what the sampler picks from the logits of the masked range."""
        hole, settings = self.hole, self.settings
        lo, hi = self.masked_range()
        self.steps += 1
        masked = hole.masked()
        max_steps = settings.max_steps
        steps_left = None if max_steps is None else max(1, max_steps - self.steps + 1)
        logits = self._constrained(logits, lo, steps_left)
        min_commit = 1
        if steps_left is not None:
            min_commit = math.ceil(int(masked.sum()) / steps_left)
        fresh = self.refresh == 1 or (self.steps - 1) % self.refresh == 0
        for observe in STEP_OBSERVERS:
            observe(logits, masked[lo:hi], settings, self.stop_tensor, fresh)
        picked, proposed_range, confidence = step(logits, masked[lo:hi], settings,
                                                  self.generator, min_commit,
                                                  stop_ids=self.stop_tensor, fresh=fresh)
        region = hole.x[hole.start : hole.end]
        commit = torch.zeros_like(masked)
        commit[lo:hi] = picked & masked[lo:hi]
        proposed = region.clone()  # outside lo..hi everything is committed already
        proposed[lo:hi] = proposed_range
        proposed_confidence = hole.confidence.clone()
        proposed_confidence[lo:hi] = confidence.float()
        commit = self._at_least(commit, proposed_confidence)
        if self.choices is not None:
            commit = choose(self.choices, hole, self.pad_id, lo, proposed, proposed_confidence)
        elif settings.stop_run and self.expand_id is None:
            commit |= self._stop_run(region, commit, proposed)
        region[commit] = proposed[commit]
        hole.confidence[commit] = proposed_confidence[commit]
        hole.committed |= commit
        self._masked_range = None
        self._after_commit()

    def _constrained(self, logits: Tensor, lo: int, steps_left: int | None) -> Tensor:
        """The logits of the masked range from position lo on, in float32, with the tokens
        the hole may not hold there at -inf (engine.decode.constraints, the choices, min_tokens)."""
        settings = self.settings
        no_room = self.hole.x.shape[0] >= self.canvas.max_length or steps_left == 1
        # With no room left, an expand token could only stay a single mask.
        no_expand = [self.expand_id] if self.expand_id is not None and no_room else []
        logits = adjust_logits(logits.float(), self.stop_ids, settings.eos_penalty, no_expand)
        self.constraints.apply(logits, starts_hole=lo == 0)
        if self.choices is not None:
            follow_choices(self.choices, self.hole, logits, lo)
        elif settings.min_tokens > 0 and self.stop_list:  # choices set their own lengths
            self._no_early_stop(logits, lo)
        return logits

    def _at_least(self, commit: Tensor, confidence: Tensor) -> Tensor:
        """The positions a step commits, given the sampler's picks `commit` (a hole of several
        adds its own minimum: engine.decode.holes)."""
        return commit

    def _stop_run(self, region: Tensor, commit: Tensor, proposed: Tensor) -> Tensor:
        """The stop run committed with this step's picks (engine.decode.hole.stop_run)."""
        return stop_run(region, self.hole.committed, commit, proposed, self.stop_tensor)

    def _no_early_stop(self, logits: Tensor, lo: int) -> None:
        """No stop token in the hole's first `min_tokens` positions (logits from lo on)."""
        if self.settings.min_tokens > lo:
            logits[: self.settings.min_tokens - lo, self.stop_list] = float("-inf")

    def _after_commit(self) -> None:
        """DreamOn's edits of the hole, or the early stop after a committed stop token."""
        if self.expand_id is not None:
            resized, deleted = edit_dreamon(self.hole, self.expand_id, self.stop_ids,
                                            self.canvas.max_length, self.config.mask_token_id)
            self.stale, self.stopped = self.stale or resized, self.stopped or deleted
        else:
            self.stopped |= stop_early(self.hole, self.stop_ids, self.pad_id)
