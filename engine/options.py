"""The options of every command that loads a model, declared once: `--model`, `--device`,
`--dtype` and `--threads` have the same names, help and choices in dg-engine's commands and
dg-lsp's (one-shot commands, the language server, the bench and eval). Light on purpose (no
torch): dg-lsp builds every command's parser at start.
"""

from __future__ import annotations

import argparse

from engine.bounds import ENGINE_THREADS_RANGE, bounded_argument

# What Engine.load takes as a dtype (engine.models.checkpoint: the floats it resolves, and the
# weight-only quantized schemes); the same list checks the editors' `dtype` setting.
DTYPES = ("auto", "int8", "int4", "float32", "bfloat16", "float16", "float64")
DTYPE_HELP = ("auto (masked models: int8 linear layers on the CPU; bfloat16 on a GPU), int8 "
              "(CPU), int4 (4-bit weights; every family), float32, bfloat16, float16, float64")
DEVICE_HELP = "auto, cpu, cuda, cuda:N, mps"


def add_model_options(parser: argparse.ArgumentParser, default: str | None = "auto",
                      model: bool = True, dtype: bool = True) -> None:
    """--model (unless `model` is False: a command that takes several declares its own),
    --device and --dtype (unless `dtype` is False), defaulting to `default` (None: the
    editor's settings decide, as in `dg-lsp serve`)."""
    shown = f" (default: {default})" if default else ""
    if model:
        parser.add_argument("--model", default=None,
                            help="checkpoint folder or hub id (default: the bundled model)")
    parser.add_argument("--device", default=default, help=DEVICE_HELP + shown)
    if dtype:
        parser.add_argument("--dtype", default=default, choices=DTYPES, metavar="DTYPE",
                            help=DTYPE_HELP + shown)


def add_threads_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--threads", type=bounded_argument(ENGINE_THREADS_RANGE), default=None,
                        help="CPU threads for the model's passes, fixed (default: "
                        "OMP_NUM_THREADS where set, else before passes as many as the other "
                        "processes leave cores, up to torch's default); more than the cores "
                        "this process may run on are capped at them (engine/threads.py)")
