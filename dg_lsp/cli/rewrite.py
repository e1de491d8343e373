"""`dg-lsp rewrite FILE --range L:C-L:C`: the editor's code actions on the command line.

Prints the new text of the range, a unified diff (`--diff`, applies with `git apply`), or
writes the file (`--apply`, atomically, through a symbolic link to its target). `--action`
runs the other infill actions at the range's start (complete-body, docstring, fix-syntax).
Lines and columns are 1-based, columns in characters. The file's line endings and BOM are
kept in the diff and the written file (dg_lsp.files); `--json` offsets count characters of
the text with "\n" newlines and no BOM. The model runs in this process (`--engine inproc`,
the default), in the resident engine, or in a team's engine (`--engine URL --token-file F`;
the file's URI goes beside each request so the team's router keeps it on one replica).
Exit status: 0 edited, 1 the model's edit was refused or the file could not be written (it
changed while the model ran, it is read-only: the reason on stderr, the file untouched), 2
bad input or no engine (a token file that cannot be used, a token the engine refuses, an
engine that cannot be reached); the file is never left half written.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from dg_lsp.actions.rewrite import DEFAULT_STRENGTH, compute_edit
from dg_lsp.actions.targets import ACTIONS, REWRITE, targets_at
from dg_lsp.cli.complete import cursor_offset
from dg_lsp.document.edit import RewriteError
from dg_lsp.document.parsed import ParsedText
from dg_lsp.engines import NoEngine, check_engine_arguments, open_for_command
from dg_lsp.files import SourceError, diff_label, read_source, unified_diff, write_source
from dg_lsp.settings import (
    ENGINE_MODES,
    add_engine_arguments,
    add_model_arguments,
    bounded_argument,
    settings_from_arguments,
)
from dg_lsp.syntax.languages import language_for
from engine.bounds import STRENGTH_RANGE


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("rewrite", help="rewrite a range of FILE (or run an action)")
    parser.add_argument("file", type=Path)
    parser.add_argument("--range", required=True, metavar="L:C-L:C",
                        help="1-based start and end (end exclusive), columns in characters")
    parser.add_argument("--action", choices=ACTIONS, default=REWRITE)
    parser.add_argument("--instruction", default=None, help="what to change, in words")
    parser.add_argument("--strength", type=bounded_argument(STRENGTH_RANGE), default=None,
                        help=f"share of the selection written again (default {DEFAULT_STRENGTH};"
                             " 1.0: from scratch)")
    out = parser.add_mutually_exclusive_group()
    out.add_argument("--diff", action="store_true", help="print a unified diff")
    out.add_argument("--apply", action="store_true", help="write the file")
    out.add_argument("--json", action="store_true", help="print the edit as JSON")
    add_model_arguments(parser)
    add_engine_arguments(parser, ENGINE_MODES, "inproc")
    parser.set_defaults(func=run)


def parse_range(text: str, spec: str) -> tuple[int, int]:
    """Character offsets of `L:C-L:C` in `text`; ValueError when malformed or outside it."""
    parts = spec.split("-")
    if len(parts) != 2:
        raise ValueError(f"expected L:C-L:C, got {spec!r}")
    offsets = []
    for part in parts:
        line, _, col = part.partition(":")
        if not line.isdigit() or not col.isdigit() or int(line) < 1 or int(col) < 1:
            raise ValueError(f"expected L:C-L:C with 1-based numbers, got {spec!r}")
        offsets.append(cursor_offset(text, int(line), int(col)))
    if offsets[1] < offsets[0]:
        raise ValueError(f"the range ends before it starts: {spec}")
    return offsets[0], offsets[1]


def run(args: argparse.Namespace) -> int:
    try:
        check_engine_arguments(args.engine, args.token_file, [args.file])
        source = read_source(args.file)
        text = source.text
        start, end = parse_range(text, args.range)
    except (SourceError, ValueError) as exc:
        print(f"dg-lsp rewrite: {exc}", file=sys.stderr)
        return 2
    doc = ParsedText(text, language_for(None, str(args.file)), uri=args.file.resolve().as_uri())
    target = next((t for t in targets_at(doc, start, end) if t.action == args.action), None)
    if target is None:
        what = "the range is empty" if args.action == REWRITE else "it does not apply here"
        print(f"dg-lsp rewrite: cannot {args.action}: {what}", file=sys.stderr)
        return 2

    from engine.serve.socket.client import EngineUnavailable

    settings = settings_from_arguments(args, engine=args.engine,
                                       engine_token_file=args.token_file)
    try:
        engine = open_for_command(settings)
        edit = compute_edit(engine, doc, target, settings, args.instruction, args.strength)
    except (NoEngine, EngineUnavailable) as exc:
        print(f"dg-lsp rewrite: {exc}; the file is unchanged", file=sys.stderr)
        return 2
    except RewriteError as exc:
        print(f"dg-lsp rewrite: {exc}; the file is unchanged", file=sys.stderr)
        return 1
    new = source.restore(text[: edit.start] + edit.text + text[edit.end :])
    if args.apply:
        try:
            write_source(source, new)
        except (SourceError, OSError) as exc:
            print(f"dg-lsp rewrite: {exc}; the file is unchanged", file=sys.stderr)
            return 1
    elif args.diff:
        sys.stdout.write(unified_diff(diff_label(args.file), source.original, new))
    elif args.json:
        print(json.dumps({"action": target.action, "start": edit.start, "end": edit.end,
                          "text": edit.text, "steps": edit.steps}, ensure_ascii=False))
    else:
        print(edit.text)
    return 0
