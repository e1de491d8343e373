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

Exit status: 0 done, 1 `--check` found changes, 2 bad input or no engine (nothing written),
3 a target failed with an error (not a refusal) or a Ray worker died, 130 interrupted.
"""

from __future__ import annotations

import argparse
import json
import sys
import threading
import time
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor, as_completed
from pathlib import Path
from typing import Any

from dg_lsp.actions.targets import FIX_SYNTAX, REWRITE, ParsedText, Target
from dg_lsp.batch import shared
from dg_lsp.batch.discover import discover
from dg_lsp.batch.job import (
    ACTION_NAMES,
    BatchJob,
    FileResult,
    Queries,
    QueryError,
    Record,
    file_targets,
    merge,
    run_target,
)
from dg_lsp.files import Source, SourceError, read_source, unified_diff, write_source
from dg_lsp.lsp.engine_host import NoEngine, check_engine_arguments, open_for_command
from dg_lsp.settings import (
    ENGINE_MODES,
    add_engine_arguments,
    add_model_arguments,
    bounded_argument,
    settings_from_arguments,
)
from dg_lsp.syntax.languages import LANGUAGES, LanguageSpec, language_for
from engine.backend import Backend
from engine.bounds import STRENGTH_RANGE

PROGRESS_EVERY = 10.0  # seconds between progress lines when stderr is not a terminal


class BadInput(Exception):
    """A command line the run cannot start with, or no engine (exit 2, nothing written)."""


class RunFailed(Exception):
    """The run broke off (a Ray worker died): exit 3; what was written is whole."""


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
    parser.add_argument("--workers", type=int, default=None,
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

    results: dict[str, FileResult] = {}
    written: list[str] = []

    def finish(result: FileResult) -> None:
        source = plans[result.label][0]
        withhold(result)
        # From here on old and new are the file's text as on disk: its line endings, its BOM.
        result.old, result.new = source.original, source.restore(result.new)
        results[result.label] = result
        if args.apply and result.new != result.old:
            _write(source, result, written)

    progress = Progress(sum(len(targets) for _, _, targets in plans.values()), len(plans),
                        "workers" if args.ray is not None else "replicas")
    try:
        if args.ray is not None:
            _run_ray(args, job, plans, finish, progress)
        elif args.engine == "inproc":
            _run_inproc(job, plans, finish, progress)
        else:
            _run_shared(args, job, plans, finish, progress)
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


# -- preparing --------------------------------------------------------------------------------


Plan = tuple[Source, ParsedText, list[Target]]  # the file as read, its document, its targets


def prepare(args: argparse.Namespace
            ) -> tuple[BatchJob, dict[str, Plan], list[tuple[str, str]], list[str]]:
    """The job, the files with work in them (by label), the files skipped, with why, and the
    files read that have nothing to do."""
    action = ACTION_NAMES[args.action]
    if args.workers is not None and args.workers < 1:
        raise BadInput("--workers must be at least 1")
    if action == REWRITE and args.query is None:
        raise BadInput("--action rewrite needs --query FILE.scm (its @target captures are the "
                       "code to rewrite)")
    if action == FIX_SYNTAX and args.query is not None:
        raise BadInput("--query does not apply to fix-syntax (its targets are syntax errors)")
    try:
        check_engine_arguments(args.engine, args.token_file, args.paths)
    except ValueError as exc:
        raise BadInput(str(exc)) from None
    if args.ray is not None and args.engine not in ENGINE_MODES:
        raise BadInput("--ray runs the model on the cluster's workers; a team's engine "
                       "(--engine URL) already spreads the work over its replicas: use one")
    if args.ray is not None:
        from dg_lsp.batch.on_ray import RayMissing, import_ray

        try:
            import_ray()
        except RayMissing as exc:
            raise BadInput(str(exc)) from None
    source = None
    if args.query is not None:
        try:
            source = args.query.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise BadInput(f"cannot read the query {args.query}: {exc}") from None
    try:
        files = discover(args.paths, args.include, args.exclude)
    except FileNotFoundError as exc:
        raise BadInput(str(exc)) from None

    settings = settings_from_arguments(args, engine=args.engine,
                                       engine_token_file=args.token_file)
    job = BatchJob(action, settings, source, args.instruction, args.strength)
    queries = Queries(source, action)
    languages = {f.label: language_for(None, f.label) for f in files}
    _check_query(queries, [spec for spec in languages.values() if spec is not None])

    plans: dict[str, Plan] = {}
    skipped: list[tuple[str, str]] = []
    idle: list[str] = []
    for file in files:
        language = languages[file.label]
        if language is None:
            skipped.append((file.label, "unknown language"))
            continue
        try:
            source = read_source(file.path)
            query = queries.for_language(language)
        except SourceError as exc:
            skipped.append((file.label, str(exc).removeprefix(f"{file.path}: ")))
            continue
        except QueryError as exc:
            skipped.append((file.label, f"the query does not fit {exc}"))
            continue
        doc = ParsedText(source.text, language, uri=file.path.resolve().as_uri())
        targets = file_targets(doc, action, query)
        if targets:
            plans[file.label] = (source, doc, targets)
        else:
            idle.append(file.label)
    return job, plans, skipped, idle


def _check_query(queries: Queries, present: list[LanguageSpec]) -> None:
    """BadInput unless the query compiles for at least one language the run meets."""
    if queries.source is None:
        return
    errors = []
    for spec in dict.fromkeys(present) or LANGUAGES:
        try:
            queries.for_language(spec)
            return
        except QueryError as exc:
            errors.append(str(exc))
    raise BadInput("malformed query: " + "; ".join(dict.fromkeys(errors)))


# -- running ----------------------------------------------------------------------------------


def _open(job: BatchJob) -> Backend:
    """The engine the command line names (dg_lsp.lsp.engine_host.open_backend); BadInput when
    there is none: the model cannot load here, the engine cannot be reached or started, the
    token file cannot be used or the token is refused."""
    from engine import CheckpointError

    try:
        return open_for_command(job.settings, priority="batch")
    except NoEngine as exc:
        raise BadInput(str(exc)) from None
    except (CheckpointError, OSError, ValueError) as exc:
        raise BadInput(f"cannot load the model: {exc}") from None


def _run_inproc(job: BatchJob, plans: dict[str, Plan], finish: Callable[[FileResult], None],
                progress: Progress) -> None:
    if not plans:
        return
    engine = _open(job)
    for label in sorted(plans):
        _, doc, targets = plans[label]
        outcomes = []
        for target in targets:
            outcomes.append(run_target(engine, doc, label, target, job))
            progress.target_done(outcomes[-1][0])
        result = merge(label, doc, outcomes)
        finish(result)
        progress.file_done(result)


def _run_shared(args: argparse.Namespace, job: BatchJob, plans: dict[str, Plan],
                finish: Callable[[FileResult], None], progress: Progress) -> None:
    """Several targets at once on the resident engine or a team's, each its own connection
    (the client is shared: every stream opens its own): the engine batches them, a team's
    router keeps each file on one replica, and a request whose replica was lost is sent
    again (dg_lsp.batch.shared)."""
    if not plans:
        return
    from engine.serve.remote import is_engine_url

    client = _open(job)
    stop = threading.Event()
    team = is_engine_url(args.engine)
    # The resident engine is one process: no other replica for a lost request to go to.
    runner = shared.TargetRunner(client, job, stop, lost_waits=None if team else ())
    progress.runner = runner

    def one(label: str, index: int) -> tuple[str, int, Any]:
        _, doc, targets = plans[label]
        return label, index, runner.run(doc, label, targets[index])

    outcomes: dict[str, list] = {label: [None] * len(plan[2]) for label, plan in plans.items()}
    left = {label: len(plan[2]) for label, plan in plans.items()}
    workers = args.workers or (shared.TEAM_WORKERS if team else shared.RESIDENT_WORKERS)
    pool = ThreadPoolExecutor(workers, thread_name_prefix="dg-batch")
    try:
        futures = [pool.submit(one, label, i) for label in sorted(plans)
                   for i in range(len(plans[label][2]))]
        for future in as_completed(futures):
            label, index, outcome = future.result()
            outcomes[label][index] = outcome
            progress.target_done(outcome[0])
            left[label] -= 1
            if not left[label]:
                result = merge(label, plans[label][1], outcomes[label])
                finish(result)
                progress.file_done(result)
    finally:
        stop.set()  # on Ctrl-C: running targets stop at their next step
        pool.shutdown(wait=True, cancel_futures=True)


def _run_ray(args: argparse.Namespace, job: BatchJob, plans: dict[str, Plan],
             finish: Callable[[FileResult], None], progress: Progress) -> None:
    from dg_lsp.batch import on_ray

    files = [(label, plans[label][1].text) for label in sorted(plans)]
    try:
        for result in on_ray.run_on_ray(args.ray or None, files, job, args.workers):
            finish(result)
            progress.file_done(result, len(result.records))
    except on_ray.RayRunFailed as exc:
        raise RunFailed(str(exc)) from None


def _write(source: Source, result: FileResult, written: list[str]) -> None:
    """Write the file whole, unless it changed on disk since it was read or cannot be written
    safely (dg_lsp.files.write_source says why)."""
    try:
        write_source(source, result.new)
    except (SourceError, OSError) as exc:
        reason = str(exc).removeprefix(f"{source.path}: ")
        result.new = result.old
        result.failure = f"not written: {reason}"
        for record in result.records:
            if record.result == "edited":
                record.result = f"error: not written: {reason}"
        print(f"dg-lsp batch: {result.label}: not written: {reason}", file=sys.stderr)
        return
    written.append(result.label)


# -- reporting --------------------------------------------------------------------------------


NOT_APPLIED = "refused: not applied: another target in the file failed"


def withhold(result: FileResult) -> None:
    """A file with a target that failed with an error is left as it was, all its edits
    withheld (never half-edited), and says why (its first failed target)."""
    failed = [r for r in result.records if r.result.startswith("error")]
    if not failed:
        return
    first = failed[0]
    where = f"{first.name or first.action} at {first.start[0]}:{first.start[1]}"
    more = f" (and {len(failed) - 1} more)" if len(failed) > 1 else ""
    result.failure = f"{where}: {first.result.removeprefix('error: ')}{more}"
    result.new = result.old
    for record in result.records:
        if record.result == "edited":
            record.result = NOT_APPLIED


def report(args: argparse.Namespace, results: dict[str, FileResult],
           skipped: list[tuple[str, str]], idle: list[str], seconds: float) -> int:
    """The patch, the JSON report and the summary; the exit status."""
    ordered = [results[label] for label in sorted(results)]
    changed = [r for r in ordered if r.new != r.old]
    failed = [r for r in ordered if r.failure]
    unchanged = sorted([r.label for r in ordered if r.new == r.old and not r.failure] + idle)
    patch = "".join(unified_diff(r.label, r.old, r.new) for r in changed)
    if args.output is not None:
        args.output.write_text(patch, encoding="utf-8")
    elif not args.apply:
        sys.stdout.write(patch)
    records = [record for r in ordered for record in r.records]
    counts = summarize(records)
    servers = served_by(ordered)
    rate = round(60 * len(ordered) / seconds, 1) if seconds > 0 and ordered else 0.0
    retried = sum(max(0, r.attempts - 1) for r in records)
    if args.json is not None:
        args.json.write_text(json.dumps({
            "action": args.action, "seed": args.seed, "files_changed": len(changed),
            "summary": counts, "targets": [r.to_json() for r in records],
            "skipped": [{"file": label, "reason": reason} for label, reason in skipped],
            "files": {"edited": [r.label for r in changed], "unchanged": unchanged,
                      "failed": [{"file": r.label, "reason": r.failure} for r in failed]},
            "workers": sorted({r.worker for r in ordered if r.worker}),
            "replicas": sorted({r.replica for r in records if r.replica}),
            "retried": retried, "seconds": round(seconds, 3), "files_per_minute": rate,
        }, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    verb = "changed" if args.apply else "would change"
    print(f"dg-lsp batch: {len(records)} targets in {len(ordered)} files: {counts['edited']} "
          f"edited, {counts['refused']} refused, {counts['error']} failed; {len(changed)} files "
          f"{verb}", file=sys.stderr)
    parts = [f"files: {len(changed)} edited, {len(unchanged)} unchanged, {len(failed)} "
             f"failed, {len(skipped)} skipped"]
    if servers:  # a team's replicas (where its answers name them) or Ray workers
        parts.append(f"{'workers' if args.ray is not None else 'replicas'}: {_names(servers)}")
    parts.append(f"{seconds:.1f} s, {rate} files/min")
    if retried:
        parts.append(f"{retried} requests sent again")
    print("dg-lsp batch: " + "; ".join(parts), file=sys.stderr)
    for r in failed:
        print(f"dg-lsp batch: failed: {r.label}: {r.failure}", file=sys.stderr)
    if args.check and changed:
        return 1
    return 3 if counts["error"] else 0


def summarize(records: Iterable[Record]) -> dict[str, int]:
    counts = {"edited": 0, "refused": 0, "error": 0}
    for record in records:
        counts[record.result.split(":", 1)[0]] += 1
    return counts


def served_by(results: Iterable[FileResult]) -> list[str]:
    """The replicas (a team's engine) or Ray workers that served the files, in the order first
    seen."""
    names: dict[str, None] = {}
    for result in results:
        if result.worker:
            names[result.worker] = None
        for record in result.records:
            if record.replica:
                names[record.replica] = None
    return list(names)


def _names(names: list[str], shown: int = 4) -> str:
    more = f", +{len(names) - shown}" if len(names) > shown else ""
    return f"{len(names)} ({', '.join(names[:shown])}{more})"


class Progress:
    """`files m/M, targets n/N, F failed, replicas R (ids)` on stderr: redrawn in place on a
    terminal, else one line every `every` seconds (a CI log gets a line now and then, not a
    redraw per target)."""

    def __init__(self, targets: int, files: int, kind: str = "replicas", stream: Any = None,
                 every: float = PROGRESS_EVERY, clock: Callable[[], float] = time.monotonic
                 ) -> None:
        self.stream = stream if stream is not None else sys.stderr
        self.targets, self.files, self.kind = targets, files, kind
        self.done_targets = self.done_files = self.failed = 0
        self.servers: dict[str, None] = {}
        self.runner: shared.TargetRunner | None = None  # its retries are shown
        self.enabled = targets > 0
        self.tty = _isatty(self.stream)
        self.every, self.clock = every, clock
        self._last = clock()
        self._drawn = False

    def target_done(self, record: Record | None = None, n: int = 1) -> None:
        self.done_targets += n
        if record is not None and record.replica:
            self.servers[record.replica] = None
        self._draw()

    def file_done(self, result: FileResult | None = None, targets: int = 0) -> None:
        """A file finished; `targets`: its targets, when they were not counted one by one."""
        self.done_files += 1
        if result is not None:
            self.failed += bool(result.failure)
            for name in served_by([result]):
                self.servers[name] = None
        self.target_done(n=targets)

    def line(self) -> str:
        text = (f"files {self.done_files}/{self.files}, targets {self.done_targets}/"
                f"{self.targets}, {self.failed} failed")
        if self.runner is not None and self.runner.retried:
            text += f", {self.runner.retried} sent again"
        if self.servers:
            text += f", {self.kind} {_names(list(self.servers))}"
        return text

    def _draw(self) -> None:
        if not self.enabled:
            return
        if self.tty:
            width = 30
            filled = width * self.done_targets // self.targets
            self.stream.write(f"\r[{'#' * filled}{'.' * (width - filled)}] {self.line()}\033[K")
            self.stream.flush()
            self._drawn = True
        elif self.clock() - self._last >= self.every:
            self._last = self.clock()
            self.stream.write(f"dg-lsp batch: {self.line()}\n")
            self.stream.flush()

    def close(self) -> None:
        if self._drawn:
            self.stream.write("\n")
            self.stream.flush()


def _isatty(stream: Any) -> bool:
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):
        return False
