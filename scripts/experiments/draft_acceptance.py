"""Would draft verification pay on held-out code? Acceptance per drafter, and its cost.

    OMP_NUM_THREADS=1 PYTHONPATH=. python scripts/experiments/draft_acceptance.py acceptance \
        [--limit 200]
    OMP_NUM_THREADS=1 PYTHONPATH=. python scripts/experiments/draft_acceptance.py cost [--runs 60]

`acceptance` cuts the held-out single-line holes `dg-lsp eval --suite cases --kinds
single-line --protocol fixed --limit 200 --seed 1` cuts (more-itertools, 32-token hole, R=4 and
int8 by default: `--cache-refresh`, `--dtype`) and fills each until the committed text holds
the line (where the server stops asking for passes) in three orders: (a) top-k k=1, one token
per pass, the most confident position first; (b) one token per pass, leftmost masked position
first: the order a draft-verification scheme reproduces exactly; (c) the default threshold
0.9. It prints edit similarity, passes and p50 of each, then replays the trajectories offline
and counts what drafters would have had accepted, each checked in one batched verification
pass (canvas j holds drafts 0..j-1 and masks from j, so d canvases settle at most d tokens):

- lookup (on b): the last n tokens before the first masked position (prefix + committed hole)
  found again in the context (the latest earlier occurrence before the hole, else the first in
  the suffix); the tokens after it are the drafts, checked in the pass that commits the current
  position; n=4..1: the longest that occurs;
- self (on b, and on a in its confidence order, which would reproduce top-k k=1): the pass's
  own argmax at the positions it would commit next, checked in the next pass.

Tokens per pass are simulated on the trajectories: what a scheme gives whose verification
canvases reproduce the one-token passes exactly.

`cost` times one cached pass over a batch of d canvases (the hole's live span, 4 tokens
written; logits of every row, or of the one row a lookup check reads) against the same pass
over one canvas: medians of `--runs`, interleaved, int8 and float32, at OMP_NUM_THREADS
threads (the resident engine runs one).
"""

from __future__ import annotations

import argparse
import statistics
import time
from dataclasses import dataclass

import torch

import engine.decode.denoise as denoise_module
from dg_lsp.measure.eval.heldout import heldout_sources
from dg_lsp.measure.eval.scoring import edit_similarity, single_line
from engine import Engine
from engine.data.cases import cut_cases
from engine.decode.kv_cache import ContextCache, PrefixCache, live_span, logit_rows
from engine.decode.samplers import propose
from engine.models.transformer import LayerKV
from engine.types import InfillRequest, SamplerSettings

HOLE_TOKENS = 32
CANVAS = 256
NGRAMS = (1, 2, 3, 4, 0)  # 0: the longest that occurs
BATCHES = (2, 4, 8)
MAX_DRAFT = 8


@dataclass
class Trajectory:
    prefix: list[int]  # canvas ids before the hole
    suffix: list[int]  # canvas ids after the hole
    # Per pass, to the end of the line: (hole position, token) of what it commits, then of
    # the positions still masked after it, in the order the sampler would take them.
    proposals: list[list[tuple[int, int]]]
    text: str  # committed text when the line was written
    seconds: float  # until then

    @property
    def commits(self) -> list[tuple[int, int]]:
        return [p[0] for p in self.proposals]

    @property
    def tokens(self) -> list[int]:
        return [token for _, token in self.commits]


def trajectory(eng: Engine, prefix: str, suffix: str, settings: SamplerSettings,
               leftmost: bool) -> Trajectory:
    """Decode with `settings`' sampler, or one token per pass leftmost-first, until the
    committed text holds the line (where the server stops asking for passes)."""
    recorded: list[tuple[list[int], list[float], list[bool]]] = []
    original = denoise_module.step

    def recording_step(logits, masked, settings, generator=None, min_commit=1):
        tokens, confidence, _ = propose(logits, settings.temperature, generator)
        recorded.append((tokens.tolist(), confidence.tolist(), masked.tolist()))
        if not leftmost:
            return original(logits, masked, settings, generator, min_commit)
        picked = torch.zeros_like(masked)
        picked[int(masked.nonzero()[0])] = True
        return picked, tokens

    request = InfillRequest(prefix, suffix, HOLE_TOKENS, settings, CANVAS)
    canvas = eng.decoder.canvas(request, HOLE_TOKENS)
    mask = eng.config.mask_token_id
    proposals, open_before = [], [True] * canvas.hole_len
    start = time.perf_counter()
    denoise_module.step = recording_step  # the sampler engine.decode.denoise.commit calls
    try:
        for draft in eng.infill_stream(request):
            if recorded:
                tokens, confidence, masked = recorded.pop()
                lo = open_before.index(True)
                open_after = [t == mask for t in draft.token_ids]
                order = [i for i, m in enumerate(masked) if m]
                if not leftmost:  # stable: ties keep position order, as the sampler's
                    order.sort(key=lambda i: -confidence[i])
                first = [(lo + order[0], tokens[order[0]])]
                proposals.append(first + [(lo + i, tokens[i]) for i in order[1:]
                                          if open_after[lo + i]])
                open_before = open_after
            if "\n" in draft.text or draft.done:
                break
    finally:
        denoise_module.step = original
    seconds = time.perf_counter() - start
    ids = canvas.ids
    return Trajectory(ids[: canvas.hole_start], ids[canvas.hole_end :], proposals,
                      draft.text, seconds)


def lookup_draft(written: list[int], suffix: list[int], n: int) -> list[int]:
    """Tokens after the latest earlier occurrence of `written`'s last n tokens (else the
    first occurrence in `suffix`); n=0: the longest of 4..1 tokens that occurs."""
    if n == 0:
        return next((d for m in (4, 3, 2, 1) if (d := lookup_draft(written, suffix, m))), [])
    if len(written) < n:
        return []
    key = written[-n:]
    for i in range(len(written) - n - 1, -1, -1):
        if written[i : i + n] == key:
            return written[i + n : i + n + MAX_DRAFT]
    for i in range(len(suffix) - n):
        if suffix[i : i + n] == key:
            return suffix[i + n : i + n + MAX_DRAFT]
    return []


def run_length(draft: list[int], truth: list[int]) -> int:
    n = 0
    for a, b in zip(draft, truth, strict=False):
        if a != b:
            break
        n += 1
    return n


def lookup_passes(tr: Trajectory, n: int, d: int) -> tuple[int, list[int]]:
    """Passes to write the line with lookup drafts checked in d canvases; the runs accepted."""
    commits, t, passes, runs = tr.tokens, 0, 0, []
    while t < len(commits):
        draft = lookup_draft(tr.prefix + commits[:t], tr.suffix, n)
        run = min(run_length(draft, commits[t:]), d - 1, len(commits) - t - 1)
        runs.append(run)
        t, passes = t + run + 1, passes + 1
    return passes, runs


def self_passes(tr: Trajectory, d: int) -> tuple[int, list[int]]:
    """Passes with the previous pass's argmax after its committed position as drafts."""
    commits, s, passes, runs = tr.commits, 0, 1, []
    while s + 1 < len(commits):
        draft = tr.proposals[s][1:]
        run = min(run_length(draft, commits[s + 1 :]), d - 1, len(commits) - s - 2)
        runs.append(run)
        s, passes = s + run + 1, passes + 1
    return passes, runs


def table_row(name: str, values: list[float]) -> str:
    return f"{name} | " + " | ".join(f"{v:.2f}" for v in values)


def acceptance(args: argparse.Namespace) -> None:
    eng = Engine.load(dtype=args.dtype)
    cases = cut_cases(heldout_sources(), args.limit, seed=1, kinds=("single-line",))
    r = args.cache_refresh
    orders = {
        "(a) top-k k=1": (SamplerSettings(sampler="topk", k=1, seed=1, cache_refresh=r), False),
        "(b) leftmost-first": (SamplerSettings(seed=1, cache_refresh=r), True),
        "(c) threshold 0.9 (default)": (SamplerSettings(seed=1, cache_refresh=r), False),
    }
    eng.infill(cases[0].prefix, cases[0].suffix)  # warm-up
    runs: dict[str, list[Trajectory]] = {}
    mean = statistics.fmean
    print(f"{len(cases)} held-out single-line holes, dtype {args.dtype}, R={r}, "
          f"hole {HOLE_TOKENS}; to the end of the line, as the server stops")
    print("order | edit similarity | passes | p50 ms")
    for name, (settings, leftmost) in orders.items():
        eng.decoder.prefix_cache = PrefixCache()
        runs[name] = [trajectory(eng, c.prefix, c.suffix, settings, leftmost) for c in cases]
        sims = [edit_similarity(single_line(tr.text), c.middle)
                for tr, c in zip(runs[name], cases, strict=True)]
        print(f"{name} | {mean(sims):.3f} | {mean(len(tr.proposals) for tr in runs[name]):.2f}"
              f" | {1000 * statistics.median(tr.seconds for tr in runs[name]):.0f}")

    print("\ndrafter | mean run accepted (drafts up to 8) | "
          + " | ".join(f"tokens/pass d={d}" for d in BATCHES))
    sizes = (MAX_DRAFT + 1, *BATCHES)
    leftmost_runs = runs["(b) leftmost-first"]
    tokens = sum(len(tr.proposals) for tr in leftmost_runs)
    for n in NGRAMS:
        results = {d: [lookup_passes(tr, n, d) for tr in leftmost_runs] for d in sizes}
        print(table_row(f"lookup n={n or '4..1'} on (b)", [
            mean(r for _, rs in results[MAX_DRAFT + 1] for r in rs),
            *(tokens / sum(p for p, _ in results[d]) for d in BATCHES)]))
    for name in ("(b) leftmost-first", "(a) top-k k=1"):
        trs = runs[name]
        tokens = sum(len(tr.proposals) for tr in trs)
        results = {d: [self_passes(tr, d) for tr in trs] for d in sizes}
        print(table_row(f"self on {name[:3]}", [
            mean(r for _, rs in results[MAX_DRAFT + 1] for r in rs),
            *(tokens / sum(p for p, _ in results[d]) for d in BATCHES)]))


def verification_pass(model, x: torch.Tensor, cache: ContextCache, p0: int, p1: int,
                      d: int, one_row: bool) -> None:
    """One cached pass over d copies of canvas `x` whose hole positions [p0, p1) are masked
    but for j drafts in copy j (any token: the cost is the same); logits of every masked
    row (`one_row`: of one, all a lookup draft's check reads)."""
    a, b = live_span(p0, p1, model.cfg.shift_logits)
    r0, r1 = logit_rows(p0, p1, model.cfg.shift_logits)
    r1 = r0 + 1 if one_row else r1
    past, past_pos = cache.outside((a, b))
    rows = x[None, a:b].repeat(d, 1)
    for j in range(d):
        rows[j, p0 - a : p0 - a + j] = x[0]
    positions = torch.arange(a, b)[None].expand(d, -1)
    kv = [LayerKV(layer.k.expand(d, -1, -1, -1), layer.v.expand(d, -1, -1, -1))
          for layer in past]
    model(rows, positions, kv, past_pos.expand(d, -1), logit_rows=(r0 - a, r1 - a))


def cost(args: argparse.Namespace) -> None:
    case = cut_cases(heldout_sources(), 1, seed=1, kinds=("single-line",))[0]
    sizes = (1, *BATCHES)
    for dtype in ("auto", "float32"):
        eng = Engine.load(dtype=dtype)
        canvas = eng.decoder.canvas(InfillRequest(case.prefix, case.suffix, HOLE_TOKENS,
                                                  canvas_length=CANVAS), HOLE_TOKENS)
        x = torch.tensor(canvas.ids)
        p0, p1 = canvas.hole_start + 4, canvas.hole_end  # mid-hole: 4 tokens written
        for one_row in (False, True):
            times: dict[int, list[float]] = {d: [] for d in sizes}
            with torch.inference_mode():
                _, kv = eng.model(x[None])
                cache = ContextCache(kv, x.shape[0])
                for d in sizes:
                    verification_pass(eng.model, x, cache, p0, p1, d, one_row)  # warm-up
                for _ in range(args.runs):
                    for d in sizes:  # interleaved, so drift hits every size alike
                        start = time.perf_counter()
                        verification_pass(eng.model, x, cache, p0, p1, d, one_row)
                        times[d].append(1000 * (time.perf_counter() - start))
            one = statistics.median(times[1])
            cells = [f"d={d}: {statistics.median(times[d]):.2f} ms "
                     f"({statistics.median(times[d]) / one:.2f}x)" for d in sizes]
            print(f"{'int8' if eng.quantized else 'float32'}, {p1 - p0 + 1} rows a canvas, "
                  f"logits of {'1 row' if one_row else 'every row'}, "
                  f"{torch.get_num_threads()} threads: " + ", ".join(cells))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="section", required=True)
    p = sub.add_parser("acceptance")
    p.add_argument("--limit", type=int, default=200)
    p.add_argument("--dtype", default="auto")
    p.add_argument("--cache-refresh", type=int, default=4)
    p = sub.add_parser("cost")
    p.add_argument("--runs", type=int, default=60)
    args = parser.parse_args()
    acceptance(args) if args.section == "acceptance" else cost(args)


if __name__ == "__main__":
    main()
