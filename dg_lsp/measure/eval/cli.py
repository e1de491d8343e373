"""`dg-lsp eval`: how well models fill holes, side by side with trivial baselines.

The models run in this process, or the model under test is a team's engine
(`--engine URL --token-file F`, the fixed protocol: see
dg_lsp.measure.eval.runner.Predictor.backend)
beside the baselines `--model` names. Exit status 2: bad input or no engine.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from dg_lsp.engines import NoEngine, check_engine_arguments, open_for_command
from dg_lsp.measure.eval import multi_hole, next_edit
from dg_lsp.measure.eval.baselines import BASELINES
from dg_lsp.measure.eval.heldout import (
    HELDOUT_PACKAGES,
    SECOND_PACKAGE,
    SECOND_VERSION,
    THIRD_PACKAGE,
    THIRD_VERSION,
    heldout_release_pairs,
    heldout_sources,
)
from dg_lsp.measure.eval.humaneval import SUITES, load_suite
from dg_lsp.measure.eval.runner import (
    BUNDLED,
    DEFAULT_HOLE_TOKENS,
    PROTOCOLS,
    CaseResult,
    Predictor,
    Summary,
    evaluate,
    load_predictor,
)
from dg_lsp.settings import Settings, add_engine_arguments, bounded_argument, sampler_argument
from engine.backend import Backend
from engine.bounds import (
    CANVAS_LENGTH_RANGE,
    CASES_RANGE,
    EXEC_TIMEOUT_RANGE,
    HOLE_SIZE_RANGE,
    Bounds,
    bounds_of,
)
from engine.data.cases import KINDS, Case, cut_cases
from engine.options import add_model_options
from engine.types import CANVAS_LENGTH, SAMPLERS, SamplerSettings

DEFAULT_MODELS = ["empty", "copy-prev-line", BUNDLED]
DEFAULT_CUT_CASES = 100
NEXT_EDIT = "next-edit"
MULTI_HOLE = "multi-hole"
CROSS_FILE = "cross-file"
RETRIEVAL = "retrieval"
# --refresh-window -1 is SamplerSettings' None: the whole canvas.
REFRESH_WINDOW_RANGE = Bounds(-1, bounds_of(SamplerSettings)["refresh_window"].high,
                              integer=True)


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "eval",
        help="measure infill quality and speed of models and baselines",
        description=__doc__,
    )
    p.add_argument("--suite", choices=[*SUITES, "cases", NEXT_EDIT, MULTI_HOLE, CROSS_FILE,
                                        RETRIEVAL],
                   default="humaneval-single",
                   help=f"'{NEXT_EDIT}': next-edit suggestions on held-out packages, through "
                   f"dg-lsp serve (--limit: cases per class); '{MULTI_HOLE}': 2-3 statements "
                   "cut from each function of --cases-from, filled jointly, one after another "
                   "and independently by one engine (--engine, --model); "
                   f"'{CROSS_FILE}': mid-line "
                   "completions with repositoryContext off and on, on the resident engine "
                   "with the default settings, on multi-file held-out packages or --cases-from "
                   "(--limit: cursors per class); "
                   f"'{RETRIEVAL}': exactly right of all cursors, mid-line and at a line's "
                   "start, beside the share whose right text the file and the package hold "
                   "(the candidates' ceiling), on the three held-out packages through the "
                   "resident engine, default settings (--limit: cursors per class, --split)")
    p.add_argument("--cases-from", type=Path, metavar="DIR",
                   help="folder of source files to cut cases from (suite 'cases')")
    p.add_argument("--kinds", default=",".join(KINDS),
                   help="hole kinds cut by --cases-from, comma-separated (default: all)")
    p.add_argument("--model", action="append", dest="models", metavar="MODEL",
                   help="checkpoint folder, hub id, 'bundled', 'empty' or 'copy-prev-line'; "
                        f"repeat to compare (default: {' '.join(DEFAULT_MODELS)})")
    p.add_argument("--protocol", choices=[*PROTOCOLS, "both"], default=None,
                   help="hole length: the true middle's (oracle) or a fixed size per kind "
                   "(default: both; with --engine URL: fixed, the only one it runs)")
    p.add_argument("--hole-tokens", action="append", default=[], metavar="KIND=N",
                   help="fixed-protocol hole size for a kind (default: "
                        + ", ".join(f"{k}={n}" for k, n in DEFAULT_HOLE_TOKENS.items()) + ")")
    p.add_argument("--cut", choices=multi_hole.CUTS, default=multi_hole.STATEMENT,
                   help=f"'{MULTI_HOLE}': a hole is the statement alone, its indentation "
                   "before it and its newline after it, as editors ask (statement, the "
                   "default), or its whole line (line: HumanEval-Infilling's shape)")
    p.add_argument("--limit", type=bounded_argument(CASES_RANGE),
                   help="number of cases (HumanEval: a seeded sample; "
                   f"cut cases: default {DEFAULT_CUT_CASES})")
    p.add_argument("--seed", type=sampler_argument("seed"), default=0,
                   help="chooses the sample and the cut cases")
    p.add_argument("--data-dir", type=Path,
                   help="HumanEval-Infilling folder (default: $DG_EVAL_DATA or "
                        "../shared/eval/human-eval-infilling)")
    p.add_argument("--sampler", default="threshold", choices=list(SAMPLERS))
    p.add_argument("--threshold", type=sampler_argument("threshold"),
                   default=SamplerSettings.threshold)
    p.add_argument("--cutoff", type=sampler_argument("cutoff"), default=SamplerSettings.cutoff,
                   help="learned sampler: commit positions the commit policy gives at least "
                   "this probability (default: %(default)s)")
    p.add_argument("--eos-penalty", type=sampler_argument("eos_penalty"), default=0.0)
    p.add_argument("--cache-refresh", type=sampler_argument("cache_refresh"),
                   default=SamplerSettings.cache_refresh,
                   metavar="R", help="recompute the context's keys/values every R steps "
                   "(1: exact; default: %(default)s)")
    p.add_argument("--refresh-window", type=bounded_argument(REFRESH_WINDOW_RANGE),
                   default=SamplerSettings.refresh_window,
                   metavar="N", help="a refresh recomputes the hole and N tokens on each side "
                   "(-1: the whole canvas)")
    p.add_argument("--no-stop-run", action="store_true",
                   help="commit padding one position per step (the plain sampler)")
    p.add_argument("--canvas-length", type=bounded_argument(CANVAS_LENGTH_RANGE),
                   default=CANVAS_LENGTH,
                   help="tokens of context + hole the model sees (default: %(default)s)")
    add_model_options(p, model=False)  # --model names several, to compare
    p.add_argument("--exec-timeout", type=bounded_argument(EXEC_TIMEOUT_RANGE), default=5.0,
                   help="seconds one HumanEval program may run")
    p.add_argument("--samples", type=Path, metavar="FILE",
                   help="also write every case's completion and scores as JSON lines")
    p.add_argument("--split", choices=("report", "tune"), default="report",
                   help=f"'{RETRIEVAL}': which half of the cursors (the judge's rules are "
                   "chosen on 'tune'; the tables are of 'report', the default)")
    p.add_argument("--json", action="store_true", help="print one JSON object instead of a table")
    add_engine_arguments(p, ("inproc", "resident"), "inproc")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from engine.serve.socket.client import EngineUnavailable

    remote = args.engine not in ("inproc", "resident")
    try:
        check_engine_arguments(args.engine, args.token_file, [])
        if remote and args.suite != MULTI_HOLE:
            check_remote(args)
    except ValueError as exc:
        print(f"dg-lsp eval: {exc}", file=sys.stderr)
        return 2
    if args.suite == MULTI_HOLE:
        return run_multi_hole(args)
    if args.suite == CROSS_FILE:
        return run_cross_file(args)
    if args.suite == RETRIEVAL:
        return run_retrieval(args)
    if args.engine == "resident":
        print(f"dg-lsp eval: --engine resident is for --suite {MULTI_HOLE} and {CROSS_FILE}; "
              "the infill suites run in this process or on a team's engine", file=sys.stderr)
        return 2
    if args.suite == NEXT_EDIT:
        return run_next_edit(args)

    hole_tokens = parse_hole_tokens(args.hole_tokens)
    cases = select_cases(args)
    protocol = args.protocol or ("fixed" if remote else "both")
    protocols = list(PROTOCOLS) if protocol == "both" else [protocol]
    settings = SamplerSettings(sampler=args.sampler, threshold=args.threshold,
                               cutoff=args.cutoff,
                               eos_penalty=args.eos_penalty, seed=args.seed,
                               stop_run=not args.no_stop_run,
                               cache_refresh=args.cache_refresh,
                               refresh_window=None if args.refresh_window < 0
                               else args.refresh_window)
    if remote:
        try:
            backend = open_for_command(Settings(engine=args.engine,
                                                engine_token_file=args.token_file))
        except NoEngine as exc:
            print(f"dg-lsp eval: {exc}", file=sys.stderr)
            return 2
        from engine.serve.team.remote import shown_url

        under_test = Predictor.backend(shown_url(args.engine), backend, settings, hole_tokens,
                                       args.canvas_length)
        baselines = args.models or [m for m in DEFAULT_MODELS if m in BASELINES]
        predictors: Iterable[Predictor] = [*(load_predictor(m) for m in baselines),
                                           under_test]
    else:
        models = args.models or DEFAULT_MODELS
        # A generator, so only one model is held in memory at a time.
        predictors = (load_predictor(m, settings, hole_tokens, args.device, args.dtype,
                                     args.canvas_length) for m in models)

    samples = open(args.samples, "w", encoding="utf-8") if args.samples else None
    try:
        def write_sample(model: str, result: CaseResult) -> None:
            if samples is not None:
                samples.write(json.dumps({"model": model, **vars(result)}) + "\n")

        summaries = evaluate(predictors, cases, protocols, args.exec_timeout, write_sample)
    except EngineUnavailable as exc:  # the team's engine went away mid-run
        print(f"dg-lsp eval: {exc}", file=sys.stderr)
        return 2
    finally:
        if samples is not None:
            samples.close()

    if args.json:
        report = {
            "suite": args.suite,
            "seed": args.seed,
            "cases": len(cases),
            "kinds": dict(sorted(count_kinds(cases).items())),
            "hole_tokens": hole_tokens,
            "canvas_length": args.canvas_length,
            "sampler": vars(settings),
            "results": [s.to_dict() for s in summaries],
        }
        json.dump(report, sys.stdout, indent=2)
        sys.stdout.write("\n")
    else:
        print(f"suite {args.suite}: {len(cases)} cases, seed {args.seed}")
        print(format_table(summaries))
    return 0


def check_remote(args: argparse.Namespace) -> None:
    """ValueError for what a team's engine cannot measure: another model beside it (only
    baselines), the oracle protocol, the next-edit suite."""
    if args.suite == NEXT_EDIT:
        raise ValueError(f"--suite {NEXT_EDIT} runs the model inside dg-lsp serve, which "
                         "reads a token file at every reconnect; measure a team's engine on "
                         "the infill suites")
    if args.protocol not in (None, "fixed"):
        raise ValueError("a team's engine runs the fixed protocol only (the oracle one "
                         "counts the middle's tokens with the model's own tokenizer): use "
                         "--protocol fixed")
    others = [m for m in args.models or [] if m not in BASELINES]
    if others:
        raise ValueError(f"with --engine URL the model under test is the engine's; --model "
                         f"names only baselines ({', '.join(BASELINES)}), not "
                         f"{', '.join(others)}")


def run_multi_hole(args: argparse.Namespace) -> int:
    """The multi-hole suite on --cases-from, through --engine (one model: --model)."""
    from engine.serve.socket.client import EngineUnavailable

    models = [m for m in (args.models or []) if m != BUNDLED]
    if args.cases_from is None or len(models) > 1:
        print(f"dg-lsp eval: --suite {MULTI_HOLE} needs --cases-from DIR and at most one "
              "--model", file=sys.stderr)
        return 2
    count = args.limit if args.limit is not None else DEFAULT_CUT_CASES
    cases = multi_hole.cut_holes_cases(args.cases_from, count, args.seed, args.cut)
    # No prefix shared between requests: each fill is reproducible, whatever ran before it.
    settings = SamplerSettings(sampler=args.sampler, threshold=args.threshold,
                               cutoff=args.cutoff, eos_penalty=args.eos_penalty,
                               seed=args.seed, stop_run=not args.no_stop_run,
                               cache_refresh=args.cache_refresh, share_prefix=False,
                               refresh_window=None if args.refresh_window < 0
                               else args.refresh_window)
    size = parse_hole_tokens(args.hole_tokens)["single-line"]
    try:
        backend = open_for_command(Settings(engine=args.engine, model=models[0] if models
                                            else None, device=args.device, dtype=args.dtype,
                                            engine_token_file=args.token_file))
        filler = multi_hole.Filler(backend, settings, size, args.canvas_length)
        tallies = multi_hole.evaluate(filler, cases)
    except (NoEngine, EngineUnavailable) as exc:
        print(f"dg-lsp eval: {exc}", file=sys.stderr)
        return 2
    if args.json:
        json.dump({"suite": MULTI_HOLE, "seed": args.seed, "cases": len(cases),
                   "cut": args.cut, "hole_tokens": size, "canvas_length": args.canvas_length,
                   **{mode: tally.to_dict() for mode, tally in tallies.items()}},
                  sys.stdout, indent=2)
        sys.stdout.write("\n")
    else:
        print(f"suite {MULTI_HOLE}: {len(cases)} cases, "
              f"{sum(t.holes for t in tallies.values()) // 3} holes cut as {args.cut}, "
              f"seed {args.seed}")
        print(multi_hole.format_table(tallies, len(cases)))
    return 0


def run_next_edit(args: argparse.Namespace) -> int:
    """The next-edit suite on the held-out packages (or --cases-from)."""
    models = [m for m in (args.models or []) if m != BUNDLED]
    if len(models) > 1:
        raise SystemExit("dg-lsp eval: --suite next-edit measures one model at a time")
    unavailable: dict[str, str] = {}
    real_pairs = None
    if args.cases_from is not None:
        folders = [args.cases_from]
        unavailable[next_edit.REAL] = "--cases-from holds one version of each file"
    else:
        folders = [heldout_sources(), heldout_sources(package=SECOND_PACKAGE,
                                                      version=SECOND_VERSION)]
        try:
            real_pairs = heldout_release_pairs()
        except OSError as exc:  # no network: the other classes are still measured
            unavailable[next_edit.REAL] = str(exc)
    per_class = args.limit if args.limit is not None else next_edit.DEFAULT_PER_CLASS
    cases, table = next_edit.run(folders, per_class, args.seed, models[0] if models else None,
                                 args.device, real_pairs)
    if real_pairs is not None and not any(c.kind == next_edit.REAL for c in cases):
        unavailable[next_edit.REAL] = ("no real edit of the pinned releases is one the "
                                       "server asks about")
    if args.json:
        json.dump({"suite": NEXT_EDIT, "seed": args.seed, "cases": len(cases),
                   "results": table, "unavailable": unavailable}, sys.stdout, indent=2)
        sys.stdout.write("\n")
    else:
        print(f"suite {NEXT_EDIT}: {len(cases)} cases, seed {args.seed}")
        print(next_edit.format_table(table))
        for kind, why in unavailable.items():
            print(f"class {kind}: unavailable ({why})")
    return 0


def default_path_backend(args: argparse.Namespace) -> Backend:
    """The engine an editor's completions use (the resident one, or a team's: --engine URL),
    for the suites that run the default path."""
    engine = args.engine if args.engine != "inproc" else "resident"
    return open_for_command(Settings(engine=engine, engine_token_file=args.token_file))


def rows_table(rows: list[dict[str, Any]]) -> str:
    """Rows of the same keys as aligned columns, a header first."""
    keys = list(rows[0]) if rows else []
    widths = [max(len(k), *(len(str(r[k])) for r in rows)) for k in keys]
    lines = ["  ".join(k.ljust(w) for k, w in zip(keys, widths, strict=True))]
    lines += ["  ".join(str(r[k]).ljust(w) for k, w in zip(keys, widths, strict=True))
              for r in rows]
    return "\n".join(lines)


def run_cross_file(args: argparse.Namespace) -> int:
    """The cross-file suite (dg_lsp.measure.eval.cross_file) on the default path."""
    from dg_lsp.measure.eval import cross_file

    try:
        folders = [args.cases_from] if args.cases_from is not None else [
            heldout_sources(package=SECOND_PACKAGE, version=SECOND_VERSION),
            heldout_sources(package=THIRD_PACKAGE, version=THIRD_VERSION)]
        backend = default_path_backend(args)
    except (OSError, NoEngine) as exc:
        print(f"dg-lsp eval: {exc}", file=sys.stderr)
        return 2
    samples = open(args.samples, "w", encoding="utf-8") if args.samples else None
    try:
        rows = cross_file.run(folders, backend, args.limit or 60, args.seed,
                              (lambda row: samples.write(json.dumps(row) + "\n"))
                              if samples else None)
    finally:
        if samples is not None:
            samples.close()
    if args.json:
        json.dump({"suite": CROSS_FILE, "seed": args.seed, "results": rows}, sys.stdout,
                  indent=2)
        sys.stdout.write("\n")
    else:
        print(f"suite {CROSS_FILE}: seed {args.seed}")
        print(rows_table(rows))
    return 0


def run_retrieval(args: argparse.Namespace) -> int:
    """The retrieval suite (dg_lsp.measure.eval.retrieval) on the default path."""
    from dg_lsp.measure.eval import retrieval

    try:
        folders = [args.cases_from] if args.cases_from is not None else [
            heldout_sources(package=name, version=version)
            for name, version in HELDOUT_PACKAGES]
        backend = default_path_backend(args)
    except (OSError, NoEngine) as exc:
        print(f"dg-lsp eval: {exc}", file=sys.stderr)
        return 2
    samples = open(args.samples, "w", encoding="utf-8") if args.samples else None

    def write(result: retrieval.Result) -> None:
        if samples is not None:
            samples.write(json.dumps({**vars(result.cursor), "document": "",
                                      "shown": result.shown, "right": result.right,
                                      "reachable": result.reachable,
                                      "ms": round(result.ms, 1)}) + "\n")

    try:
        results = retrieval.run(folders, backend, args.limit or 40, args.seed, args.split,
                                on_result=write)
    finally:
        if samples is not None:
            samples.close()
    rows = retrieval.table(results)
    if args.json:
        json.dump({"suite": RETRIEVAL, "seed": args.seed, "split": args.split,
                   "results": rows}, sys.stdout, indent=2)
        sys.stdout.write("\n")
    else:
        print(f"suite {RETRIEVAL}: seed {args.seed}, split {args.split}")
        print(rows_table(rows))
    return 0


def select_cases(args: argparse.Namespace) -> list[Case]:
    if args.suite == "cases":
        if args.cases_from is None:
            raise SystemExit("dg-lsp eval: --suite cases needs --cases-from DIR")
        kinds = tuple(k.strip() for k in args.kinds.split(",") if k.strip())
        unknown = set(kinds) - set(KINDS)
        if unknown:
            raise SystemExit(f"dg-lsp eval: unknown hole kinds {sorted(unknown)}")
        count = args.limit if args.limit is not None else DEFAULT_CUT_CASES
        return cut_cases(args.cases_from, count, seed=args.seed, kinds=kinds)
    return load_suite(args.suite, args.data_dir, args.limit, args.seed)


def parse_hole_tokens(overrides: list[str]) -> dict[str, int]:
    sizes = dict(DEFAULT_HOLE_TOKENS)
    for item in overrides:
        kind, _, number = item.partition("=")
        if (kind not in sizes or not number.isdecimal()
                or not HOLE_SIZE_RANGE.admits(int(number))):
            raise SystemExit(f"dg-lsp eval: --hole-tokens expects KIND=N with KIND in "
                             f"{', '.join(sizes)} and N in {HOLE_SIZE_RANGE.low}.."
                             f"{HOLE_SIZE_RANGE.high}, got {item!r}")
        sizes[kind] = int(number)
    return sizes


def count_kinds(cases: list[Case]) -> dict[str, int]:
    counts: dict[str, int] = {}
    for case in cases:
        counts[case.kind] = counts.get(case.kind, 0) + 1
    return counts


COLUMNS = [
    ("model", lambda s: s.model),
    ("protocol", lambda s: s.protocol),
    ("cases", lambda s: str(s.cases)),
    ("pass@1", lambda s: _percent(s.pass_at_1)),
    ("EM", lambda s: _percent(s.exact_match)),
    ("edit sim", lambda s: f"{s.edit_similarity:.3f}"),
    ("fwd/case", lambda s: f"{s.forward_passes_per_case:.1f}"),
    ("tok/fwd", lambda s: "-" if s.tokens_per_forward is None else f"{s.tokens_per_forward:.2f}"),
    ("p50 ms", lambda s: f"{s.latency_ms_p50:.1f}"),
    ("p95 ms", lambda s: f"{s.latency_ms_p95:.1f}"),
]


def format_table(summaries: list[Summary]) -> str:
    rows = [[name for name, _ in COLUMNS]]
    rows += [[cell(s) for _, cell in COLUMNS] for s in summaries]
    widths = [max(len(row[i]) for row in rows) for i in range(len(COLUMNS))]
    lines = ["  ".join(c.ljust(w) if i < 2 else c.rjust(w)
                       for i, (c, w) in enumerate(zip(row, widths, strict=True)))
             for row in rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def _percent(value: float | None) -> str:
    return "-" if value is None else f"{100 * value:.1f}%"
