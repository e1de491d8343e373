"""The range of every number a client can set, written once.

Each bounded field of a settings or request dataclass carries its `Bounds` in the field's
metadata (`bounded(...)`); the language server's settings parser, the engine's wire parser and
the command lines all read it from there. The ranges are what the engine and the pipeline can
run: a NaN or infinite temperature reaches the sampler as NaN probabilities, a seed of 2**64
overflows the generator, an eos penalty of 1e308 silences every completion.

No torch here: clients and validators read it without loading the engine.
"""

from __future__ import annotations

import argparse
import dataclasses
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

MAX_SEED = 2**63 - 1  # torch.Generator.manual_seed's range


@dataclass(frozen=True)
class Bounds:
    low: float
    high: float
    integer: bool = False
    nullable: bool = False  # null is allowed (it means "no limit")

    def admits(self, value: Any) -> bool:
        if value is None:
            return self.nullable
        if isinstance(value, bool) or not isinstance(value, int | float):
            return False
        if self.integer and not isinstance(value, int):
            return False
        return math.isfinite(value) and self.low <= value <= self.high

    def problem(self, name: str, value: Any) -> str | None:
        """Why `value` is not a valid `name` (None when it is)."""
        return None if self.admits(value) else f"{name}: expected {self}, got {value!r}"

    def __str__(self) -> str:
        if self.integer:
            text = f"an integer in {self.low}..{self.high}"
        else:
            text = f"a finite number in {self.low}..{self.high}"
        return text + " or null" if self.nullable else text


def bounded(default: Any, bounds: Bounds) -> Any:
    """A dataclass field with its range in the metadata."""
    return dataclasses.field(default=default, metadata={"bounds": bounds})


def bounds_of(cls: type) -> dict[str, Bounds]:
    """The bounded fields of dataclass `cls` by name."""
    return {f.name: f.metadata["bounds"] for f in dataclasses.fields(cls)
            if "bounds" in f.metadata}


def check_bounds(obj: Any) -> None:
    """ValueError naming the first bounded field of dataclass instance `obj` outside its range,
    by its command-line spelling (`--seq-len`): a command refuses a bad number before any
    work rather than failing inside it (or never ending)."""
    for name, bounds in bounds_of(type(obj)).items():
        problem = bounds.problem("--" + name.replace("_", "-"), getattr(obj, name))
        if problem is not None:
            raise ValueError(problem)


def bounded_argument(bounds: Bounds) -> Callable[[str], int | float]:
    """An argparse `type` held to `bounds`: every number a command line takes is refused by
    its flag's name when it is not one, not finite or out of range, before any work."""
    def parse(text: str) -> int | float:
        try:
            value: int | float = int(text) if bounds.integer else float(text)
        except ValueError:
            kind = "an integer" if bounds.integer else "a number"
            raise argparse.ArgumentTypeError(f"expected {kind}, got {text!r}") from None
        if not bounds.admits(value):
            raise argparse.ArgumentTypeError(f"expected {bounds}, got {text}")
        return value
    return parse


def bounded_list_argument(bounds: Bounds) -> Callable[[str], list[int | float]]:
    """An argparse `type` for comma-separated numbers (`1,4,8`), each held to `bounds`."""
    parse = bounded_argument(bounds)

    def parse_list(text: str) -> list[int | float]:
        return [parse(item) for item in text.split(",")]
    return parse_list


# The TCP ports a listener may take (0, "any free port", would leave clients not knowing it).
PORT_RANGE = Bounds(1, 65535, integer=True)


def host_port_argument(text: str) -> str:
    """An argparse `type` for a HOST:PORT listener: refused before the model is loaded, not
    when the listener is opened after it (a port past 65535 ended in an internal error)."""
    _, colon, port = text.rpartition(":")  # an empty host is 127.0.0.1 to the listeners
    if not colon or not port.isdigit():
        raise argparse.ArgumentTypeError(f"expected HOST:PORT, got {text!r}")
    if not PORT_RANGE.admits(int(port)):
        raise argparse.ArgumentTypeError(f"expected a port in {PORT_RANGE.low}.."
                                         f"{PORT_RANGE.high}, got {port}")
    return text


# A request's shape, shared by the editor's settings and the wire (where the model's own
# positions may cap the canvas further).
CANVAS_LENGTH_RANGE = Bounds(64, 8192, integer=True)
SUFFIX_FRACTION_RANGE = Bounds(0, 0.95)
STRENGTH_RANGE = Bounds(0, 1)  # a rewrite's share of tokens written again
HOLE_SIZE_RANGE = Bounds(1, 1024, integer=True)
# A request with several holes (engine.types.HolesRequest): how many, and their tokens in all
# (each hole is one HOLE_SIZE_RANGE); the stubs of one function, not a file's worth of masks.
HOLE_COUNT_RANGE = Bounds(1, 16, integer=True)
MASKED_TOKENS_RANGE = Bounds(1, 2048, integer=True)
# The confidence gate: a completion whose calibrated probability of being close to right, or
# an edit whose least confident generated token, is below it is not shown (dg_lsp.document.gate;
# 0 shows everything).
MIN_CONFIDENCE_RANGE = Bounds(0, 1)


# `dg-engine train` and `dg-engine distill` (engine.train): what one run can do. The highs
# only keep a number finite and sane; the lows are where a run breaks.
# A budget must run out: 0 minutes divided the schedule by zero and a negative budget never
# ended; a step limit, when given, is at least one step.
RUN_MINUTES_RANGE = Bounds(0.01, 1e6)
RUN_STEPS_RANGE = Bounds(1, 10**9, integer=True, nullable=True)
BATCH_RANGE = Bounds(1, 65536, integer=True)  # 0 rows cannot be reshaped into a batch
# Train's rows: a hole of at least 8 tokens (engine.train.examples.HOLE_BUCKETS) with 8 of
# prefix, in at most half a row; shorter rows made the batch thread fail ("low >= high").
SEQ_LEN_RANGE = Bounds(32, 8192, integer=True)
LEARNING_RATE_RANGE = Bounds(0, 1)
WEIGHT_DECAY_RANGE = Bounds(0, 10)
WARMUP_STEPS_RANGE = Bounds(1, 10**9, integer=True)  # the warmup divides by it
PERIOD_MINUTES_RANGE = Bounds(0, 1e6)  # how often to save or check; 0: at every chance
SHARE_RANGE = Bounds(0, 1)
THREADS_RANGE = Bounds(0, 4096, integer=True)  # 0: torch's own choice
SEED_RANGE = Bounds(0, MAX_SEED, integer=True)  # of a run, or of the cases a tool cuts
TRAIN_SEED_RANGE = SEED_RANGE
SHARD_MB_RANGE = Bounds(0.001, 1e6)
# A model trained from scratch; its head size (hidden / heads) is checked beside.
HIDDEN_RANGE = Bounds(8, 65536, integer=True)
LAYERS_RANGE = Bounds(1, 1024, integer=True)
HEADS_RANGE = Bounds(1, 1024, integer=True)
FFN_RANGE = Bounds(1, 1 << 20, integer=True)
EDITS_RANGE = Bounds(0, 10**8, integer=True)
# Distillation: holes the teacher fills (0 left no trajectory to train on), the passes ahead
# the student predicts (0 left no target: a NaN loss), the certainty term's weight.
HOLES_RANGE = Bounds(1, 10**8, integer=True)
WINDOW_RANGE = Bounds(1, 1024, integer=True)
CERTAINTY_RANGE = Bounds(0, 100)


# `dg-engine serve` (engine.serve.command). A batch or queue of 0 admitted no request, a
# negative deadline ended every one at once and a NaN one none, a negative memory budget
# refused them all.
MAX_BATCH_RANGE = Bounds(1, 1024, integer=True)
MAX_QUEUE_RANGE = Bounds(1, 10**6, integer=True)
MAX_CONNECTIONS_RANGE = Bounds(1, 10**6, integer=True)
REQUEST_TIMEOUT_RANGE = Bounds(0.01, 1e6)  # seconds
REQUEST_MB_RANGE = Bounds(0, 10**8, integer=True)  # 0: a quarter of the free memory
IDLE_EXIT_RANGE = Bounds(0, 1e9)  # seconds; 0: never
# A canvas length past which a request is background work; the canvases' own range.
LARGE_CANVAS_RANGE = CANVAS_LENGTH_RANGE
# The CPU threads of the engine's passes (`--threads`): a count past the cores this process
# may run on is capped at them when the engine starts (engine.threads.user_threads).
ENGINE_THREADS_RANGE = Bounds(1, 4096, integer=True)
# `dg-engine plan --memory-gb`: a device's memory; an infinite one overflowed into bytes.
MEMORY_GB_RANGE = Bounds(0.001, 1e6)
# A block model's own canvas (config.json's canvas_length): the tokens it denoises at once
# (the tiny test model's is 8); a negative one failed inside a request, a huge one asked
# for canvas x vocabulary logits.
MODEL_CANVAS_RANGE = Bounds(1, 8192, integer=True)


# `dg-engine serve --ray` (engine.serve.team.command): Ray Serve may scale a team's engine
# down to no replica (--min-replicas 0), never start with none.
REPLICAS_RANGE = Bounds(1, 1024, integer=True)
MIN_REPLICAS_RANGE = Bounds(0, 1024, integer=True)
# Seconds, as Ray Serve's autoscaling config takes them; the window is averaged over.
AUTOSCALE_DELAY_RANGE = Bounds(0, 1e6)
AUTOSCALE_WINDOW_RANGE = Bounds(0.01, 1e6)
# CPUs a CPU replica reserves (a fraction shares a core): inf ended in round()'s
# OverflowError inside the replica.
REPLICA_CPUS_RANGE = Bounds(0.1, 1024)
MAX_PER_CLIENT_RANGE = MAX_CONNECTIONS_RANGE  # one address's share of the front's connections


# The corpus (`dg-engine corpus`): its token ids are stored as uint16, and the vocabulary
# holds the 8 special tokens and the 256 bytes; text caps in MB (0 used to mean no cap).
VOCAB_SIZE_RANGE = Bounds(264, 65536, integer=True)
CORPUS_MB_RANGE = Bounds(0.001, 1e7)
# `dg-engine version-edits --releases`: one release has no pair to cut edits from.
RELEASES_RANGE = Bounds(2, 1000, integer=True)


# The benchmarks and measurements (dg-engine bench, dg-lsp bench and eval, the fitting
# tools): 0 cases or runs divided by zero or took the median of nothing, and a negative count
# sliced off all but the last case.
CASES_RANGE = Bounds(1, 10**6, integer=True)
RUNS_RANGE = Bounds(1, 10**6, integer=True)  # timed repeats of one measurement
EPOCHS_RANGE = Bounds(1, 10**7, integer=True)
HIDDEN_UNITS_RANGE = Bounds(0, 4096, integer=True)  # 0: logistic regression
FUNCTIONS_RANGE = Bounds(0, 10**4, integer=True)  # typed keystroke by keystroke; 0: none
CLIENTS_RANGE = Bounds(1, 1024, integer=True)  # a thread each
WORKERS_RANGE = Bounds(1, 1024, integer=True)  # concurrent targets or Ray actors
EXEC_TIMEOUT_RANGE = Bounds(0.1, 3600)  # seconds one evaluated program may run
# `python -m engine.kernels.bench --shape NxV`: a hole's positions by a vocabulary.
KERNEL_POSITIONS_RANGE = Bounds(1, 8192, integer=True)
KERNEL_VOCAB_RANGE = Bounds(1, 1 << 20, integer=True)


# The workspace index (dg_lsp.repository): what it holds at most, so that a huge repository
# costs what a large one does. Files past the count, larger than a file's limit, or past the
# total are left out (the nearest to the root first are kept).
MAX_INDEXED_FILES = 20_000
MAX_INDEXED_FILE_BYTES = 512_000
MAX_INDEXED_CHARS = 60_000_000
# What one completion reads of it: the other files scanned for alike lines and windows,
# nearest first, and the occurrences of the cursor line's beginning examined in each.
RETRIEVAL_FILES = 64
RETRIEVAL_OCCURRENCES = 64
# The latest edits of other open documents a completion reads (dg_lsp.lsp.repository), and
# the lines of each.
MAX_RECENT_EDITS = 3
RECENT_EDIT_LINES = 6


def holes_problem(texts: int, max_tokens: Any) -> str | None:
    """Why a request with `texts` texts around holes of `max_tokens` tokens each is not one
    the engine serves (None when it is): one more text than holes, the holes' count, each
    hole's size and their tokens in all within their ranges."""
    if not isinstance(max_tokens, list | tuple):
        return f"max_tokens: expected a list of integers, got {max_tokens!r:.60}"
    if problem := HOLE_COUNT_RANGE.problem("holes", len(max_tokens)):
        return problem
    if texts != len(max_tokens) + 1:
        return (f"texts: expected one more text than holes ({len(max_tokens) + 1}: the prefix, "
                f"the code between the holes, the suffix), got {texts}")
    for i, n in enumerate(max_tokens):
        if problem := HOLE_SIZE_RANGE.problem(f"max_tokens[{i}]", n):
            return problem
    return MASKED_TOKENS_RANGE.problem("max_tokens in all", sum(max_tokens))
