"""The model options, declared once (engine/options.py): every command that loads a model
offers the same --device and --dtype, with the same choices, and refuses the same values."""

from __future__ import annotations

import argparse

import pytest

from dg_lsp.cli import build_parser as dg_lsp_parser
from engine.cli import build_parser as dg_engine_parser
from engine.options import DTYPES


def subcommands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    found = {}
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            found.update(action.choices)
    return found


def option(parser: argparse.ArgumentParser, flag: str) -> argparse.Action | None:
    return next((a for a in parser._actions if flag in a.option_strings), None)


COMMANDS = {**{f"dg-lsp {name}": p for name, p in subcommands(dg_lsp_parser()).items()},
            **{f"dg-engine {name}": p for name, p in subcommands(dg_engine_parser()).items()}}
# Commands whose --dtype means another thing: plan's is the dtype it plans for (bf16, fp32...).
OWN_DTYPES = {"dg-engine plan"}


def test_every_command_that_takes_a_dtype_offers_the_same_ones():
    takes = {name: option(p, "--dtype") for name, p in COMMANDS.items()
             if option(p, "--dtype") is not None and name not in OWN_DTYPES}
    assert {"dg-lsp serve", "dg-lsp complete", "dg-lsp rewrite", "dg-lsp fill", "dg-lsp batch",
            "dg-lsp eval", "dg-engine serve"} <= set(takes)
    assert {name: tuple(a.choices) for name, a in takes.items()} == {
        name: DTYPES for name in takes}
    assert {name: "int4" in a.help for name, a in takes.items()} == {name: True for name in takes}


@pytest.mark.parametrize("argv", [["dg-lsp", "serve"], ["dg-lsp", "complete", "x.py:1:1"],
                                  ["dg-engine", "serve"]])
def test_a_dtype_no_engine_loads_is_refused_by_name(argv, capsys):
    parser = dg_lsp_parser() if argv[0] == "dg-lsp" else dg_engine_parser()
    with pytest.raises(SystemExit) as exit_:
        parser.parse_args([*argv[1:], "--dtype", "int5"])
    assert exit_.value.code == 2
    assert "argument --dtype: invalid choice: 'int5'" in capsys.readouterr().err


def test_the_language_server_leaves_device_and_dtype_to_the_editor_unless_given():
    args = dg_lsp_parser().parse_args(["serve"])
    assert (args.model, args.device, args.dtype) == (None, None, None)
    args = dg_lsp_parser().parse_args(["complete", "x.py:1:1"])
    assert (args.model, args.device, args.dtype) == (None, "auto", "auto")
