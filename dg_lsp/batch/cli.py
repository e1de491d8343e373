"""`dg-lsp batch PATHS... --action A`: one infill action over every file of a repository.

Prints one unified diff (`git apply` takes it; files in sorted order), or writes the files
(`--apply`, each atomically once all its targets are done, so Ctrl-C leaves every file either
untouched or fully written), or gates CI (`--check`: exit 1 when anything would change,
nothing written). `--json REPORT` records every target: span, result, steps, tokens per step,
seconds. A failing target is recorded and the run goes on.

The work goes to the resident engine by default, several targets at a time at "batch"
priority (the engine steps them in one batched forward pass, after interactive requests);
`--engine URL --token-file F` sends them to a team's engine the same way (each with its file's
URI, so the team's router keeps a file on one replica), retrying a request whose replica was
lost (dg_lsp.batch.shared); `--engine inproc` loads the model here and runs one target at a
time; `--ray [ADDRESS]` spreads files over a Ray cluster (dg_lsp.batch.on_ray).

A file is edited whole or not at all: when one of its targets fails with an error (after any
retries), none of its edits is applied, the file is left as it was and reported as failed
with the reason. Progress (files, targets, failures, the replicas or Ray workers that served
them) goes to stderr, redrawn in place on a terminal, else a line every PROGRESS_EVERY seconds
(a CI log); the run ends with a summary there: targets, files edited / unchanged / failed (each
failure with its reason), replicas, seconds, files per minute.

`--action fill-holes` fills each function's stub holes together (dg_lsp.actions.holes); with
`--check` it runs no model: it lists every hole (`FILE:LINE: hole: TEXT`) and exits 1 while
any remains, so CI can flag stubs.

Exit status: 0 done, 1 `--check` found changes (fill-holes: holes), 2 bad input or no engine
(nothing written), 3 a target failed with an error (not a refusal) or a Ray worker died, 130
interrupted.

Here the command line and the run's course; the work is prepared in dg_lsp.batch.plan, run in
dg_lsp.batch.runners, and written and reported in dg_lsp.batch.report.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from dg_lsp.actions.stubs import stubs_in
from dg_lsp.actions.targets import FILL_FUNCTION
from dg_lsp.batch import shared
from dg_lsp.batch.job import ACTION_NAMES, FileResult
from dg_lsp.batch.plan import BadInput, Plan, prepare
from dg_lsp.batch.report import Progress, report, withhold, write_file
from dg_lsp.batch.runners import RunFailed, run_inproc, run_ray, run_shared
from dg_lsp.settings import (
    ENGINE_MODES,
    add_engine_arguments,
    add_model_arguments,
    bounded_argument,
)
from engine.bounds import STRENGTH_RANGE, WORKERS_RANGE


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("batch", help="run an action over every file under PATHS")
    parser.add_argument("paths", nargs="+", type=Path, metavar="PATH")
    parser.add_argument("--action", required=True, choices=list(ACTION_NAMES))
    parser.add_argument("--query", type=Path, default=None, metavar="FILE.scm",
                        help="tree-sitter query: its @target captures are what `rewrite` "
                             "rewrites; for docstrings / complete-bodies it replaces the "
                             "built-in query (@function / @class, @body, @name)")
    parser.add_argument("--instruction", default=None, help="what to change, in words")
    parser.add_argument("--strength", type=bounded_argument(STRENGTH_RANGE), default=None,
                        help="share of a rewrite's tokens written again (0..1)")
    parser.add_argument("--include", action="append", default=None, metavar="GLOB",
                        help="only files whose path or name matches (repeatable)")
    parser.add_argument("--exclude", action="append", default=None, metavar="GLOB",
                        help="skip files whose path or name matches (repeatable)")
    parser.add_argument("--output", type=Path, default=None, metavar="FILE",
                        help="write the patch here instead of stdout")
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--apply", action="store_true", help="write the edited files")
    mode.add_argument("--check", action="store_true",
                      help="exit 1 when anything would change; write no file")
    parser.add_argument("--json", type=Path, default=None, metavar="REPORT",
                        help="write a report of every target")
    add_model_arguments(parser)
    add_engine_arguments(parser, ENGINE_MODES, "resident")
    parser.add_argument("--workers", type=bounded_argument(WORKERS_RANGE), default=None,
                        help=f"concurrent targets on the resident engine (default "
                             f"{shared.RESIDENT_WORKERS}) or a team's (default "
                             f"{shared.TEAM_WORKERS}), or Ray actors (default: one per GPU, "
                             "else per CPU)")
    parser.add_argument("--ray", nargs="?", const="", default=None, metavar="ADDRESS",
                        help="distribute files over a Ray cluster (no ADDRESS: a local one)")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    started = time.perf_counter()
    try:
        job, plans, skipped, idle = prepare(args)
    except BadInput as exc:
        print(f"dg-lsp batch: {exc}", file=sys.stderr)
        return 2
    for label, reason in skipped:
        if reason != "unknown language":
            print(f"dg-lsp batch: skipped {label}: {reason}", file=sys.stderr)
    if args.check and job.action == FILL_FUNCTION:
        return _list_holes(plans)

    results: dict[str, FileResult] = {}
    written: list[str] = []

    def finish(result: FileResult) -> None:
        source = plans[result.label][0]
        withhold(result)
        # From here on old and new are the file's text as on disk: its line endings, its BOM.
        result.old, result.new = source.original, source.restore(result.new)
        results[result.label] = result
        if args.apply and result.new != result.old:
            write_file(source, result, written)

    progress = Progress(sum(len(targets) for _, _, targets in plans.values()), len(plans),
                        "workers" if args.ray is not None else "replicas")
    try:
        if args.ray is not None:
            run_ray(args, job, plans, finish, progress)
        elif args.engine == "inproc":
            run_inproc(job, plans, finish, progress)
        else:
            run_shared(args, job, plans, finish, progress)
    except KeyboardInterrupt:
        progress.close()
        print(f"dg-lsp batch: interrupted; {len(written)} files written whole, the others "
              "untouched", file=sys.stderr)
        return 130
    except BadInput as exc:
        progress.close()
        print(f"dg-lsp batch: {exc}", file=sys.stderr)
        return 2
    except RunFailed as exc:
        progress.close()
        print(f"dg-lsp batch: {exc}; {len(written)} files written whole, the others untouched",
              file=sys.stderr)
        return 3
    progress.close()
    return report(args, results, skipped, idle, time.perf_counter() - started)


def _list_holes(plans: dict[str, Plan]) -> int:
    """`--action fill-holes --check`: every hole, no model; 1 while any remains."""
    count = 0
    for label in sorted(plans):
        _, doc, targets = plans[label]
        for target in targets:
            for stub in stubs_in(doc, target.start, target.end):
                print(f"{label}:{stub.line + 1}: hole: {doc.text[stub.start:stub.end]}")
                count += 1
    print(f"dg-lsp batch: {count} holes in {len(plans)} files", file=sys.stderr)
    return 1 if count else 0
