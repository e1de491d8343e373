"""The masked family's step: fill a canvas's hole in a few parallel steps.

Each step runs the model, proposes a token for every hole position and commits the ones the
sampler picks (engine.decode.samplers); committed tokens never change. The step is plain
functions of a Sequence (engine.decode.sequence: the canvas, what is committed, the counts)
and the `Rules` it holds (set when it starts, `begin`): `step_alone` runs its next pass alone
(`forward`) and commits from it (`advance`), returning a `Draft`; the last one has `done=True`
and a `finish_reason`. The runner (engine.decode.runner) steps a Sequence alone or runs the
full passes of several as one batch (`full_pass_input` / `hole_from_full` / `advance`).
Which canvas rows a pass runs is engine.decode.kv_cache; which tokens the hole may hold,
engine.decode.constraints; what a step commits besides the sampler's picks (the stop run,
early stop, DreamOn's edits, choices, and each hole's own rules when a request has several),
engine.decode.hole.

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
from dataclasses import replace

import torch
from torch import Tensor

from engine.decode import hole as rule
from engine.decode.constraints import token_constraints
from engine.decode.kv_cache import (
    ContextCache,
    PrefixCache,
    first_positions,
    hole_logits,
    joined,
    live_span,
    logit_rows,
    rows_to_logits,
)
from engine.decode.samplers import adjust_logits, step
from engine.decode.sequence import Rules, Sequence
from engine.models.config import ModelConfig
from engine.models.transformer import LayerKV, Transformer
from engine.text.canvas import Canvas, HolesCanvas, VocabText, completion_text, to_lf
from engine.text.stops import completion_ids
from engine.text.tokenizer import Tokenizer
from engine.types import Draft, SamplerSettings, UnitEnd, score_of


def _sync(device: torch.device) -> None:
    # Timings of asynchronous devices mean nothing without a sync.
    if device.type == "cuda":
        torch.cuda.synchronize(device)


# Told of every masked-family step's sampler input, before it commits: (logits of the masked
# range, which of its positions are masked, the settings, the stop ids, whether the context
# was refreshed). How engine.train.commit_policy records the model's trajectories.
StepObserver = Callable[[Tensor, Tensor, SamplerSettings, Tensor, bool], None]
STEP_OBSERVERS: list[StepObserver] = []


def begin(
    seq: Sequence,
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
) -> Sequence:
    """Lay `canvas`'s hole into `seq`, with the rules its steps follow; no pass is run.

    `stop_ids`: the tokens that end the completion (`Decoder.stop_ids`). `start` (tokens,
    committed flags) replaces the all-mask hole: a rewrite keeps the committed tokens and
    denoises the rest. `passes_before`: forward passes already run for this hole (a rewrite's
    scoring pass), counted in its drafts' steps."""
    if config.mask_token_id is None:
        raise ValueError("the model has no mask token")
    device = next(model.parameters()).device
    timings = {} if timings is None else timings
    timings.setdefault("forward", 0.0)
    timings.setdefault("sample", 0.0)
    stop_list = sorted(stop_ids)
    pad = config.pad_token_id
    expand_id = config.expand_token_id
    choices = canvas.choices if expand_id is None else None
    refresh = max(1, settings.cache_refresh)
    seq.rules = Rules(
        tokenizer=tokenizer, canvas=canvas, settings=settings, stop_ids=stop_ids,
        stop_list=stop_list,
        stop_tensor=torch.tensor(stop_list, dtype=torch.long, device=device),
        pad_id=pad if pad is not None else config.eos_token_id, expand_id=expand_id,
        mask_id=config.mask_token_id,
        constraints=token_constraints(config, canvas, model.cfg.vocab_size, device, stop_ids,
                                      stop_early=stop_early, vocab=vocab,
                                      follows_choices=choices is not None),
        choices=choices, refresh=refresh,
        prefix_cache=prefix_cache if refresh > 1 and settings.share_prefix else None,
        timings=timings, holes=[(0, canvas.hole_len)])
    seq.generator = torch.Generator(device=device).manual_seed(settings.seed)
    seq.x = torch.tensor(canvas.ids, device=device)
    seq.start, seq.n = canvas.hole_start, canvas.hole_len
    seq.committed = torch.zeros(seq.n, dtype=torch.bool, device=device)
    seq.confidence = torch.full((seq.n,), math.nan, device=device)
    if start is not None:
        seq.set_hole(*start)
        seq.rules.holes = [(0, seq.n)]
    seq.ended = [False]
    seq.passes_before = passes_before
    return seq


def begin_holes(seq: Sequence, model: Transformer, config: ModelConfig, tokenizer: Tokenizer,
                layout: HolesCanvas, settings: SamplerSettings, stop_ids: set[int], *,
                vocab: VocabText, texts: list[str] | tuple[str, ...],
                units: tuple[UnitEnd | None, ...], timings: dict[str, float] | None = None,
                prefix_cache: PrefixCache | None = None) -> Sequence:
    """`begin` for several holes of one canvas (engine.decode.holes): the canvas hole spans
    them all, the code kept between them committed from the start; `texts`: the request's;
    `units`: each hole's unit end."""
    begin(seq, model, config, tokenizer, layout.canvas, settings, stop_ids, vocab=vocab,
          timings=timings, prefix_cache=prefix_cache, start=(layout.tokens, layout.committed))
    rules = seq.rules
    rules.holes, rules.heals = layout.holes, layout.heals
    for k, heal in enumerate(layout.heals[1:], start=1):
        if heal:
            first = torch.zeros(model.cfg.vocab_size, dtype=torch.bool, device=seq.x.device)
            first[vocab.ids_starting_with(heal)] = True
            rules.firsts[k] = first
    rules.texts = [to_lf(text) for text in texts]
    rules.units = list(units)
    seq.ended = [False] * len(layout.holes)
    return seq


def done(seq: Sequence) -> bool:
    """Whether every hole position is committed."""
    return seq.n == 0 or not bool(seq.masked().any())


def passes(seq: Sequence) -> int:
    """Forward passes run for this hole (and before it: `passes_before`)."""
    return seq.steps - seq.reused + seq.passes_before


def draft(seq: Sequence, finished: bool = False, reason: str = "") -> Draft:
    """The hole as it stands: its committed text up to the first gap or stop token (several
    holes: each hole's, in `holes`, and spliced into the code kept between them)."""
    rules = seq.rules
    if rules.texts is not None:
        return _holes_draft(seq, rules, finished, reason)
    tokens = seq.hole_tokens()
    committed = seq.committed.tolist()
    settled = next((i for i, c in enumerate(committed) if not c), len(committed))
    ids = completion_ids(tokens[:settled], rules.stop_ids)
    text = completion_text(rules.canvas, rules.tokenizer.decode(ids))
    n = passes(seq)
    sampled = [c for c in seq.confidence[: len(ids)].tolist() if not math.isnan(c)]
    return Draft(step=n, token_ids=tokens, committed=sum(committed), text=text,
                 done=finished, finish_reason=reason, score=score_of(sampled, n))


def _holes_draft(seq: Sequence, rules: Rules, finished: bool, reason: str) -> Draft:
    ids: list[int] = []
    confidences: list[float] = []
    committed = 0
    for k, (a, b) in enumerate(rules.holes):
        hole_ids = rule.hole_ids(seq, rules, k)
        ids += hole_ids
        confidences += [c for c in seq.confidence[a : a + len(hole_ids)].tolist()
                        if not math.isnan(c)]
        committed += int(seq.committed[a:b].sum())
    holes = tuple(rule.hole_text(seq, rules, k) for k in range(len(rules.holes)))
    texts = ([text.replace("\n", "\r\n") for text in rules.texts] if rules.canvas.crlf
             else rules.texts)
    n = passes(seq)
    return Draft(step=n, token_ids=ids, committed=committed, text=rule.spliced(texts, holes),
                 done=finished, finish_reason=reason, score=score_of(confidences, n), holes=holes)


def final(seq: Sequence, reason: str | None = None) -> Draft:
    """The last Draft: `reason` given (cancelled), or how the hole ended."""
    return draft(seq, True, reason or ("stop" if seq.stopped else "length"))


def step_alone(model: Transformer, seq: Sequence) -> Draft:
    """Run the hole's next forward pass alone and commit from it; the new Draft."""
    if done(seq):
        return final(seq)
    t0 = time.perf_counter()
    logits = forward(model, seq)
    _sync(seq.x.device)
    seq.rules.timings["forward"] += time.perf_counter() - t0
    return advance(model, seq, logits)


def batchable(seq: Sequence) -> bool:
    """Whether its next pass may run in a batch with other holes' (a plain full pass)."""
    return not done(seq) and full_pass_next(seq) and not reuses_prefix(seq)


def full_pass_input(model: Transformer, seq: Sequence) -> tuple[Tensor, tuple[int, int]]:
    """What a batched full pass needs of this hole: its canvas ids [S] and the canvas
    rows it reads logits of (`hole_from_full` then takes its own)."""
    return seq.x, _logit_rows(model, seq)


def full_pass_next(seq: Sequence) -> bool:
    """Whether the next step runs the whole canvas (else the live span, cached)."""
    if seq.rules.refresh == 1 or seq.stale:
        return True
    return refresh_next(seq) and seq.rules.settings.refresh_window is None


def refresh_next(seq: Sequence) -> bool:
    """Whether the next step refreshes the cache (a full pass, or a windowed one)."""
    return seq.steps % seq.rules.refresh == 0


def masked_range(seq: Sequence) -> tuple[int, int]:
    """Hole positions [lo, hi), first masked to last: the rows a step reads and samples.

    Committed positions around them need no logits, and a cached pass need not run them
    (a trailing run of committed pads is most of a single-line hole). Read once a step
    (forward, then advance): it syncs with the device."""
    if seq.span is None:
        idx = seq.masked().nonzero()
        seq.span = (0, 0) if idx.numel() == 0 else (int(idx[0]), int(idx[-1]) + 1)
    return seq.span


def _canvas_span(seq: Sequence) -> tuple[int, int]:
    lo, hi = masked_range(seq)
    return seq.start + lo, seq.start + hi


def _logit_rows(model: Transformer, seq: Sequence) -> tuple[int, int]:
    """Canvas rows a full pass must compute logits for."""
    return logit_rows(*_canvas_span(seq), model.cfg.shift_logits)


def hole_from_full(model: Transformer, seq: Sequence, raw: Tensor, kv: list[LayerKV],
                   offset: int = 0) -> Tensor:
    """Logits of the hole's masked range (rows lo..hi-1 of `masked_range`) from a full
    pass: raw logits [1, r, V] of canvas rows offset.. (covering the hole's logit rows),
    keys/values of every position. Keeps the cache when R > 1."""
    p0, p1 = _canvas_span(seq)
    shifted = model.cfg.shift_logits
    r0, r1 = logit_rows(p0, p1, shifted)
    if seq.rules.refresh > 1:
        seq.cache, seq.stale = ContextCache(kv, seq.x.shape[0]), False
        seq.wrote_cache = True
    return rows_to_logits(raw[0, r0 - offset : r1 - offset], p0, p1, shifted)


def reuses_prefix(seq: Sequence) -> bool:
    """Whether the next pass starts from another request's cached prefix."""
    return seq.rules.prefix_cache is not None and seq.steps == 0


def forward(model: Transformer, seq: Sequence) -> Tensor:
    """Run the hole's next forward pass alone; the logits of its masked range."""
    with torch.inference_mode():
        if reuses_prefix(seq):
            return _first_pass_from_prefix_cache(model, seq)
        if full_pass_next(seq):
            rows = _logit_rows(model, seq)
            raw, kv = model(seq.x[None], logit_rows=rows)
            return hole_from_full(model, seq, raw, kv, offset=rows[0])
        if not refresh_next(seq):
            logits, _ = hole_logits(model, seq.x, _canvas_span(seq), seq.cache)
            return logits
        return _windowed_refresh(model, seq)


def _windowed_refresh(model: Transformer, seq: Sequence) -> Tensor:
    """The live span and `refresh_window` positions around it recomputed, their new
    keys/values kept; the hole's logits."""
    window = max(0, seq.rules.settings.refresh_window or 0)
    span = _canvas_span(seq)
    live = live_span(*span, model.cfg.shift_logits, window, seq.x.shape[0])
    logits, kv = hole_logits(model, seq.x, span, seq.cache, live)
    seq.cache = seq.cache.refreshed(live, kv)
    seq.wrote_cache = True
    return logits


def _first_pass_from_prefix_cache(model: Transformer, seq: Sequence) -> Tensor:
    prefix_cache = seq.rules.prefix_cache
    ids = seq.x[: seq.start].tolist()
    reuse, past = prefix_cache.lookup(ids)
    reuse = min(reuse, seq.start - 1)  # the token before the hole stays a query
    r0, r1 = _logit_rows(model, seq)
    if past is None or reuse < PrefixCache.MIN_REUSE:
        reuse = 0
        raw, kv = model(seq.x[None], logit_rows=(r0, r1))
    else:
        past = first_positions(past, reuse)
        device = seq.x.device
        positions = torch.arange(reuse, seq.x.shape[0], device=device)[None]
        raw, new = model(seq.x[None, reuse:], positions, past,
                         torch.arange(reuse, device=device)[None],
                         logit_rows=(r0 - reuse, r1 - reuse))
        kv = joined(past, new)
    prefix_cache.store(ids, first_positions(kv, seq.start, copy=True))
    return hole_from_full(model, seq, raw, kv, offset=r0)


def advance(model: Transformer, seq: Sequence, logits: Tensor) -> Draft:
    """Commit what the sampler picks from this step's logits (of the masked range, as
    `forward` and `hole_from_full` return them); the new Draft.

    After a pass that wrote the cache, the next cached pass sees nothing new when all
    that was committed since lies outside its live span: the trailing pads of a
    single-line hole, or the first masked position, which it reads from the cache as the
    mask it was. That pass would return these same logits for its rows, so its step
    commits from them at once instead ("Steps without a pass" above)."""
    scored, top = judged(seq, logits) if seq.judged is not None else ((), ())
    t1 = time.perf_counter()
    reusable, seq.wrote_cache = seq.wrote_cache, False
    first = masked_range(seq)[0]
    before = seq.committed.clone()
    commit(seq, logits)
    shifted = model.cfg.shift_logits
    while reusable and not done(seq) and sees_nothing_new(seq, seq.committed & ~before, shifted):
        lo, hi = masked_range(seq)
        seq.reused += 1
        commit(seq, logits[lo - first : hi - first])
    _sync(seq.x.device)
    seq.rules.timings["sample"] += time.perf_counter() - t1
    finished = done(seq)
    new = draft(seq, finished, ("stop" if seq.stopped else "length") if finished else "")
    return replace(new, choice_logprobs=scored, top_logprobs=top) if scored else new


def judged(seq: Sequence, logits: Tensor
           ) -> tuple[tuple[tuple[float, ...], ...], tuple[float, ...]]:
    """A judged request's choices scored by its first pass (InfillRequest.judge), where every
    hole position is masked (`logits` holds a row for each): per choice, the log-probability
    of each of its tokens at its position, then that of an end token right after it; and the
    highest log-probability at each position."""
    assert seq.judged is not None
    choices, seq.judged = seq.judged, None
    logp = torch.log_softmax(logits.float(), dim=-1)
    end = torch.logsumexp(logp[:, sorted(choices.ends)], dim=-1)
    scored = []
    for tokens in choices.sequences:
        if not tokens or len(tokens) >= logp.shape[0]:
            scored.append(())
            continue
        at = torch.arange(len(tokens), device=logp.device)
        picked = logp[at, torch.tensor(tokens, dtype=torch.long, device=logp.device)]
        scored.append((*picked.tolist(), float(end[len(tokens)])))
    return tuple(scored), tuple(logp.max(dim=-1).values.tolist())


def sees_nothing_new(seq: Sequence, changed: Tensor, shifted: bool) -> bool:
    """Whether the next step runs a cached pass none of the hole positions `changed`
    is a query of (each reads as it was when the cache was written)."""
    if seq.rules.expand_id is not None or full_pass_next(seq) or refresh_next(seq):
        return False
    a, b = live_span(*masked_range(seq), shifted)
    return not bool(changed[a:b].any())


def commit(seq: Sequence, logits: Tensor) -> None:
    """One step: commit what the sampler picks from the logits of the masked range."""
    rules, settings = seq.rules, seq.rules.settings
    lo, hi = masked_range(seq)
    seq.steps += 1
    masked = seq.masked()
    max_steps = settings.max_steps
    steps_left = None if max_steps is None else max(1, max_steps - seq.steps + 1)
    logits = constrained(seq, logits, lo, steps_left)
    min_commit = 1
    if steps_left is not None:
        min_commit = math.ceil(int(masked.sum()) / steps_left)
    fresh = rules.refresh == 1 or (seq.steps - 1) % rules.refresh == 0
    for observe in STEP_OBSERVERS:
        observe(logits, masked[lo:hi], settings, rules.stop_tensor, fresh)
    picked, proposed_range, confidence = step(logits, masked[lo:hi], settings, seq.generator,
                                              min_commit, stop_ids=rules.stop_tensor,
                                              fresh=fresh)
    region = seq.x[seq.start : seq.hole_end]
    chosen = torch.zeros_like(masked)
    chosen[lo:hi] = picked & masked[lo:hi]
    proposed = region.clone()  # outside lo..hi everything is committed already
    proposed[lo:hi] = proposed_range
    proposed_confidence = seq.confidence.clone()
    proposed_confidence[lo:hi] = confidence.float()
    chosen = rule.one_per_hole(chosen, proposed_confidence, masked, rules.holes)
    if rules.choices is not None:
        chosen = rule.choose(rules.choices, seq, rules.pad_id, lo, proposed, proposed_confidence)
    elif settings.stop_run and rules.expand_id is None:
        chosen |= rule.stop_runs(region, seq.committed, chosen, proposed, rules.stop_tensor,
                                 rules.holes)
    region[chosen] = proposed[chosen]
    seq.confidence[chosen] = proposed_confidence[chosen]
    seq.committed |= chosen
    seq.span = None
    _after_commit(seq, rules)


def constrained(seq: Sequence, logits: Tensor, lo: int, steps_left: int | None) -> Tensor:
    """The logits of the masked range from position lo on, in float32, with the tokens
    the hole may not hold there at -inf (engine.decode.constraints, the choices, min_tokens,
    a later hole's healed first token)."""
    rules, settings = seq.rules, seq.rules.settings
    no_room = seq.x.shape[0] >= rules.canvas.max_length or steps_left == 1
    # With no room left, an expand token could only stay a single mask.
    no_expand = [rules.expand_id] if rules.expand_id is not None and no_room else []
    logits = adjust_logits(logits.float(), rules.stop_ids, settings.eos_penalty, no_expand)
    rules.constraints.apply(logits, starts_hole=lo == 0)
    if rules.choices is not None:
        rule.follow_choices(rules.choices, seq, logits, lo)
    elif settings.min_tokens > 0 and rules.stop_list:  # choices set their own lengths
        rule.no_early_stop(logits, lo, rules)
    rule.heal_later_holes(logits, lo, seq, rules)
    return logits


def _after_commit(seq: Sequence, rules: Rules) -> None:
    """DreamOn's edits of the hole, or each hole's early stop and unit end."""
    if rules.expand_id is not None:
        resized, deleted = rule.edit_dreamon(seq, rules.expand_id, rules.stop_ids,
                                             rules.canvas.max_length, rules.mask_id)
        seq.stale, seq.stopped = seq.stale or resized, seq.stopped or deleted
        rules.holes = [(0, seq.n)]
    elif rules.texts is None:
        seq.stopped |= rule.stop_early_in(seq.x[seq.start : seq.hole_end], seq.committed,
                                          rules.stop_ids, rules.pad_id)
    else:
        rule.end_holes(seq, rules)
