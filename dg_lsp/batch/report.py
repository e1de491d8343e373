"""What `dg-lsp batch` leaves: each file written whole or not at all, the patch, the JSON
report, the summary and exit status, and the progress on stderr while it runs."""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable, Iterable
from typing import Any

from dg_lsp.batch import shared
from dg_lsp.batch.job import FileResult, Record
from dg_lsp.files import Source, SourceError, unified_diff, write_source

PROGRESS_EVERY = 10.0  # seconds between progress lines when stderr is not a terminal


def write_file(source: Source, result: FileResult, written: list[str]) -> None:
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
