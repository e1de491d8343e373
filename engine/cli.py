"""`dg-engine` command line: corpus, train, infill, serve."""

from __future__ import annotations

import argparse
import importlib
import sys

# Each module adds its subcommand with `register(subparsers)` and sets `func` on the parser.
SUBCOMMAND_MODULES = [
    "engine.train.corpus",
    "engine.train.trainer",
    "engine.serve.daemon",
    "engine.serve.bench",
]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="dg-engine", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    for name in SUBCOMMAND_MODULES:
        importlib.import_module(name).register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(sys.argv[1:] if argv is None else argv)
    return int(args.func(args) or 0)


if __name__ == "__main__":
    sys.exit(main())
