"""`dg-engine` command line: corpus, train, version-edits, distill, merge, infill, serve, plan,
quantize."""

from __future__ import annotations

import argparse
import importlib
import logging
import os
import sys
from collections.abc import Callable

from engine.models.config import CheckpointError

log = logging.getLogger(__name__)

# Each module adds its subcommand with `register(subparsers)` and sets `func` on the parser.
SUBCOMMAND_MODULES = [
    "engine.train.corpus",
    "engine.train.trainer",
    "engine.train.real_edits",
    "engine.train.distill",
    "engine.train.merge",
    "engine.serve.command",
    "engine.serve.team.command",
    "engine.serve.bench",
    "engine.models.plan",
    "engine.models.quantized",
]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="dg-engine", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    for name in SUBCOMMAND_MODULES:
        importlib.import_module(name).register(sub)
    return parser


def run_command(prog: str, command: Callable[[], int | None]) -> int:
    """Run a command line's work; a failure is one line on stderr and a non-zero status.

    A user gets `prog: cannot load the model: <file>: <reason>`, not a 30-line traceback;
    DG_DEBUG=1 shows the traceback for a bug report."""
    try:
        return int(command() or 0)
    except KeyboardInterrupt:
        print(f"{prog}: interrupted", file=sys.stderr)
        return 130
    except CheckpointError as exc:
        message, status = f"cannot load the model: {exc}", 2
    except (ValueError, OSError) as exc:  # a device that is absent, a file that is not there
        message, status = str(exc) or type(exc).__name__, 2
    except Exception as exc:  # noqa: BLE001 - the last line of defence: one line, not a trace
        message, status = f"internal error: {type(exc).__name__}: {exc}", 1
    if os.environ.get("DG_DEBUG"):
        log.exception("%s failed", prog)
    first_line = message.strip().split("\n", 1)[0]
    print(f"{prog}: {first_line}", file=sys.stderr)
    return status


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(sys.argv[1:] if argv is None else argv)
    return run_command("dg-engine", lambda: args.func(args))


if __name__ == "__main__":
    sys.exit(main())
