"""`dg-lsp fill FILE [--range L1-L2] [--apply | --check]`: fill the stub holes of a file.

The holes are the code actions' (dg_lsp.actions.stubs: `...` alone on its line, `pass  # TODO`,
a TODO / FIXME comment alone in a body, `todo!()`); each function's are filled together in one
request (dg_lsp.actions.holes), `--range` keeping to the holes on lines L1 to L2 (1-based,
inclusive; `L` alone: one line). Prints a unified diff (`git apply` takes it), or writes the
file (`--apply`, atomically, line endings and BOM kept: dg_lsp.files), or runs no model at all
(`--check`: prints `FILE:LINE: hole: TEXT` for each hole and exits 1 while any remains, 0 when
none does, so CI can flag stubs).

A function whose fills are refused (one is empty or does not parse) keeps its holes; the
reason goes to stderr with the function's line, and the other functions are filled. Exit
status: 0 every hole filled (or none to fill), 1 a function's fills refused or the file could
not be written (it is then untouched), 2 bad input or no engine.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from dg_lsp.actions.holes import all_hole_targets, fill_edit
from dg_lsp.actions.stubs import stubs_in
from dg_lsp.document.edit import RewriteError, spliced
from dg_lsp.document.parsed import ParsedText
from dg_lsp.engines import NoEngine, check_engine_arguments, open_for_command
from dg_lsp.files import SourceError, diff_label, read_source, unified_diff, write_source
from dg_lsp.settings import (
    ENGINE_MODES,
    add_engine_arguments,
    add_model_arguments,
    settings_from_arguments,
)
from dg_lsp.syntax.languages import language_for


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("fill", help="fill the stub holes of FILE (or --check for "
                                                "them)")
    parser.add_argument("file", type=Path)
    parser.add_argument("--range", default=None, metavar="L1-L2",
                        help="only the holes on lines L1 to L2 (1-based, inclusive)")
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--apply", action="store_true", help="write the file")
    mode.add_argument("--check", action="store_true",
                      help="list the holes, exit 1 while any remains; no model runs")
    add_model_arguments(parser)
    add_engine_arguments(parser, ENGINE_MODES, "inproc")
    parser.set_defaults(func=run)


def line_range(text: str, spec: str | None) -> tuple[int, int]:
    """Character offsets [start, end] of lines `L1-L2` (or `L`) of `text`; the whole text
    for None; ValueError when malformed or outside it."""
    if spec is None:
        return 0, len(text)
    first, _, last = spec.partition("-")
    last = last or first
    if not first.isdigit() or not last.isdigit() or int(first) < 1 or int(last) < int(first):
        raise ValueError(f"--range expects L1-L2 with 1 <= L1 <= L2, got {spec!r}")
    lines = text.split("\n")
    if int(first) > len(lines):
        raise ValueError(f"--range {spec}: the file has {len(lines)} lines")
    start = sum(len(line) + 1 for line in lines[: int(first) - 1])
    end = start + sum(len(line) + 1 for line in lines[int(first) - 1 : int(last)]) - 1
    return start, min(end, len(text))


def run(args: argparse.Namespace) -> int:
    try:
        check_engine_arguments(args.engine, args.token_file, [args.file])
        source = read_source(args.file)
        start, end = line_range(source.text, args.range)
    except (SourceError, ValueError) as exc:
        print(f"dg-lsp fill: {exc}", file=sys.stderr)
        return 2
    language = language_for(None, str(args.file))
    if language is None:
        print(f"dg-lsp fill: {args.file}: no grammar reads this file's language",
              file=sys.stderr)
        return 2
    doc = ParsedText(source.text, language, uri=args.file.resolve().as_uri())
    if args.check:
        stubs = stubs_in(doc, start, end)
        for stub in stubs:
            print(f"{args.file}:{stub.line + 1}: hole: {doc.text[stub.start:stub.end]}")
        return 1 if stubs else 0
    targets = all_hole_targets(doc, start, end)
    if not targets:
        return 0
    return _fill(args, source, doc, targets)


def _fill(args: argparse.Namespace, source, doc: ParsedText, targets: list) -> int:
    from engine.serve.socket.client import EngineUnavailable

    settings = settings_from_arguments(args, engine=args.engine,
                                       engine_token_file=args.token_file)
    parts, refused = [], 0
    line, counted = 1, 0  # the line of `counted`: targets come in document order
    try:
        engine = open_for_command(settings)
        for target in targets:
            try:
                parts += fill_edit(engine, doc, target, settings).parts
            except RewriteError as exc:
                refused += 1
                line += doc.text.count("\n", counted, target.start)
                counted = target.start
                print(f"dg-lsp fill: {args.file}:{line}: {target.name}: {exc}; its holes are "
                      "left", file=sys.stderr)
    except (NoEngine, EngineUnavailable) as exc:
        print(f"dg-lsp fill: {exc}; the file is unchanged", file=sys.stderr)
        return 2
    new = source.restore(spliced(doc.text, sorted(parts)))
    if args.apply and new != source.original:
        try:
            write_source(source, new)
        except (SourceError, OSError) as exc:
            print(f"dg-lsp fill: {exc}; the file is unchanged", file=sys.stderr)
            return 1
    elif not args.apply:
        sys.stdout.write(unified_diff(diff_label(args.file), source.original, new))
    return 1 if refused else 0
