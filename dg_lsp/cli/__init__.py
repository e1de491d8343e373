"""`dg-lsp` command line: with no subcommand it serves LSP on stdio, as editors expect."""

from __future__ import annotations

import argparse
import importlib
import sys

from engine.cli import run_command

# Each module adds its subcommand with `register(subparsers)` and sets `func` on the parser.
SUBCOMMAND_MODULES = [
    "dg_lsp.lsp.server",
    "dg_lsp.cli.complete",
    "dg_lsp.cli.rewrite",
    "dg_lsp.cli.fill",
    "dg_lsp.batch.cli",
    "dg_lsp.measure.eval.cli",
    "dg_lsp.measure.bench",
    "dg_lsp.cli.doctor",
]


def build_parser() -> argparse.ArgumentParser:
    from dg_lsp.cli.doctor import version

    parser = argparse.ArgumentParser(prog="dg-lsp", description=__doc__)
    parser.add_argument("--version", action="version", version=f"dg-lsp {version()}")
    sub = parser.add_subparsers(dest="command")
    for name in SUBCOMMAND_MODULES:
        importlib.import_module(name).register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    parser = build_parser()
    if not argv or argv[0].startswith("--") and argv[0] not in ("--version", "--help"):
        argv = ["serve", *argv]
    args = parser.parse_args(argv)
    return run_command("dg-lsp", lambda: args.func(args))

