"""Plain data passed between the engine's parts and its users."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

from engine.bounds import MAX_SEED, Bounds, bounded

# Tokens in a canvas (context and hole) when the caller names no other length: the editor's
# default, and what the engine's requests, benchmarks and evaluation assume.
CANVAS_LENGTH = 256

# The suffix's share of the canvas's context budget (what the hole leaves) when the caller
# names none; the prefix gets the rest (the code before the cursor says most about what comes
# next). The token cut in engine.text.canvas is the one place that applies it.
SUFFIX_FRACTION = 0.25


# The commit rules engine.decode.samplers implements (SamplerSettings.sampler); torch-free, so
# clients and settings validators name them without loading the engine.
SAMPLERS = ("topk", "threshold", "entropy", "learned")


@dataclass
class SamplerSettings:
    """How a hole is denoised. Defaults are the interactive ones; each number's range is in
    its field's metadata (engine.bounds), the one place every parser reads it from."""

    # "topk" (LLaDA baseline), "threshold" (Fast-dLLM), "entropy" (EB), "learned" (Learn2PD)
    sampler: str = "threshold"
    # topk: positions committed per step
    k: int = bounded(1, Bounds(1, 1024, integer=True))
    # threshold: commit every position with confidence >= this
    threshold: float = bounded(0.9, Bounds(0, 1))
    # entropy: commit lowest-entropy positions while sum - max <= gamma
    gamma: float = bounded(0.1, Bounds(0, 100))
    # learned: commit every position the commit policy gives >= this
    cutoff: float = bounded(0.5, Bounds(0, 1))
    temperature: float = bounded(0.0, Bounds(0, 10))  # 0 = greedy
    # subtracted from EOS/pad logits (fights EOS flooding)
    eos_penalty: float = bounded(0.0, Bounds(0, 100))
    seed: int = bounded(0, Bounds(0, MAX_SEED, integer=True))
    # None: at most one step per hole token
    max_steps: int | None = bounded(None, Bounds(1, 8192, integer=True, nullable=True))
    # Recompute context keys/values every R steps (1 = exact, no reuse). 4 is the default
    # because it measures best on held-out code for every hole kind: positions committed
    # since the last refresh still read as masks, which lets the model write whole lines.
    cache_refresh: int = bounded(4, Bounds(1, 1024, integer=True))
    # A refresh recomputes the hole and this many tokens on each side (None: the whole canvas).
    refresh_window: int | None = bounded(16, Bounds(0, 8192, integer=True, nullable=True))
    # With cache_refresh > 1, start from the keys/values an earlier request computed for the
    # same leading tokens (a keystroke's prefix). They were computed beside another hole, so
    # the result depends on what the engine served before: off where an edit must be
    # reproducible (code actions, batch).
    share_prefix: bool = True
    # no stop token in the hole's first N positions (a body is not empty)
    min_tokens: int = bounded(0, Bounds(0, 8192, integer=True))
    # Once a stop token is committed, commit with it the hole's trailing run of positions
    # whose proposal is a stop token: the end of the hole is settled in one step instead of
    # one padding position per step (masked family).
    stop_run: bool = True


@dataclass(frozen=True)
class UnitEnd:
    """What ends the unit the client shows (engine.text.units): "line" the first newline,
    "brackets" a closer with no opener in the text, "block" a line dedented to the opener's
    level (`base_indent`), or text on the opener's own line (`line_prefix`: the cursor's line
    before the cursor)."""

    kind: str
    line_prefix: str = ""
    base_indent: str = ""


# The two requests an engine serves. Each is built once, where the caller decides what to
# ask (dg_lsp.completion.pipeline, dg_lsp.actions.rewrite), and travels unchanged through the
# Backend, the wire
# (engine.serve.socket.protocol.to_wire / from_wire), the scheduler's job and the family's decoder.
# What stops a request early (a cancel, a deadline) is not part of it: it is not data.


@dataclass(frozen=True)
class InfillRequest:
    """Fill the hole between `prefix` and `suffix` with at most `max_tokens` tokens."""

    prefix: str
    suffix: str
    max_tokens: int = 32
    settings: SamplerSettings = field(default_factory=SamplerSettings)
    canvas_length: int = CANVAS_LENGTH  # tokens of context and hole together
    suffix_fraction: float = SUFFIX_FRACTION  # the suffix's share of the context's tokens
    # The unit the client shows: the engine stops once the committed text holds its end
    # (the last draft's finish_reason is then "unit"); None: the hole's own end.
    until: UnitEnd | None = None
    # None, or the texts the hole may hold: it then holds one of them or nothing
    # (engine.text.choices). A next edit's word is one the edits show; a small model asked to copy a
    # rare word writes a frequent one instead (`logger` for `iterator`), or a piece of it.
    choices: tuple[str, ...] | None = None
    # With `choices`: the choices are scored, not imposed. The first pass scores every choice
    # where it would stand (the first Draft's choice_logprobs), for the client to choose among
    # them (dg_lsp.completion.judge), and the hole is written freely from that same pass on:
    # a client that takes a choice closes the stream; one that takes none has lost no pass.
    # A family that cannot score in one pass writes the hole with none.
    judge: bool = False


@dataclass(frozen=True)
class RewriteRequest:
    """Write `original` (the text between `prefix` and `suffix`) again at `strength`: the share
    of its tokens generated again (1.0: a fresh infill of a hole of `max_tokens`, or sized
    from `original` when None; engine.text.remask)."""

    prefix: str
    suffix: str
    original: str
    strength: float = 1.0
    max_tokens: int | None = None
    settings: SamplerSettings = field(default_factory=SamplerSettings)
    canvas_length: int = CANVAS_LENGTH
    suffix_fraction: float = SUFFIX_FRACTION

    def afresh(self, hole: int) -> InfillRequest:
        """The infill that writes the original afresh in a hole of `hole` tokens."""
        return InfillRequest(self.prefix, self.suffix, hole, self.settings, self.canvas_length,
                             self.suffix_fraction)


@dataclass(frozen=True)
class HolesRequest:
    """Fill several holes in one canvas: `texts[0]` (the prefix), a hole, `texts[1]` (code
    kept between the holes), a hole, ..., `texts[-1]` (the suffix); len(texts) is
    len(max_tokens) + 1. The holes are denoised jointly, each seeing the others' text as it
    forms; each holds at most its `max_tokens` and ends on its own stop token or at its own
    unit end (`until`, one per hole, or None for every hole's own end)."""

    texts: tuple[str, ...]
    max_tokens: tuple[int, ...]
    settings: SamplerSettings = field(default_factory=SamplerSettings)
    canvas_length: int = CANVAS_LENGTH
    suffix_fraction: float = SUFFIX_FRACTION
    until: tuple[UnitEnd | None, ...] | None = None


@dataclass(frozen=True)
class Score:
    """How sure the model was of a completion: the confidences (the probability the sampler
    gave a token when it committed it) of the completion's tokens, those it generated (a
    rewrite's kept tokens are the user's), up to the first stop or uncommitted position. A
    by-product of the passes run: no pass is added for it. The confidence gate
    (dg_lsp.document.gate) reads it: through a calibrator for completions, `lowest` for edits."""

    lowest: float  # the least confident token's confidence (1.0 when none was generated)
    mean: float  # their mean (1.0 when none was generated)
    tokens: int  # how many were scored
    passes: int  # forward passes taken


def score_of(confidences: list[float], passes: int) -> Score:
    """The Score of a completion whose generated tokens had `confidences`."""
    if not confidences:
        return Score(1.0, 1.0, 0, passes)
    return Score(min(confidences), sum(confidences) / len(confidences), len(confidences),
                 passes)


@dataclass
class Draft:
    """The hole after one denoising step."""

    step: int  # forward passes so far
    token_ids: list[int]  # hole tokens; uncommitted positions hold the mask/noise id
    committed: int  # hole positions committed so far
    text: str  # the committed text up to the first gap or stop token
    done: bool = False
    finish_reason: str = ""  # set on the last Draft: "stop", "length" or "cancelled"
    # The committed completion's Score; None where the family records none (AR, block): the
    # completion is shown as if ungated.
    score: Score | None = None
    # A HolesRequest's committed text per hole (each up to its first gap or stop token), in
    # order; () for the other requests. A HolesRequest's draft has in `text` the code from the
    # first hole to the last with these in place, in `token_ids` every hole's completion tokens
    # (engine.decode.holes).
    holes: tuple[str, ...] = ()
    # A judged request's first Draft (InfillRequest.judge): per choice, in order, the
    # log-probability the first pass gave each of its tokens at its position in the hole, then
    # that of the hole ending after it (any end token); () for a choice longer than the hole.
    choice_logprobs: tuple[tuple[float, ...], ...] = ()
    # Beside them, the highest log-probability the first pass gave any token at each hole
    # position: how far below the model's own first pick each choice's tokens are.
    top_logprobs: tuple[float, ...] = ()


def last_draft(drafts: Iterator[Draft], stop: Callable[[], bool] | None = None
               ) -> Draft | None:
    """The last of `drafts` read: the final one, or the one in hand when `stop()` said to stop
    early; None when there was none. The stream is closed either way, so that an engine
    stopped early frees what the request held."""
    last = None
    try:
        for draft in drafts:
            last = draft
            if stop is not None and stop():
                break
    finally:
        close = getattr(drafts, "close", None)
        if close is not None:
            close()
    return last


@dataclass
class InfillResult:
    text: str
    token_ids: list[int]  # the completion's tokens, stop tokens excluded
    steps: int  # forward passes of the model
    tokens: int  # tokens of the completion
    tokens_per_step: float
    finish_reason: str  # "stop" (model ended the hole), "length" (hole full), "cancelled"
    timings: dict[str, float] = field(default_factory=dict)  # seconds per stage


@dataclass
class HolesResult:
    """A HolesRequest run to its end (engine.Engine.fill_holes)."""

    texts: tuple[str, ...]  # each hole's text, in order
    steps: int  # forward passes of the model, every hole's together
    finish_reason: str  # "stop" (every hole ended on its stop or unit), "length", "cancelled"
