"""Starting `dg-lsp serve` under pytest-lsp's client, as the LSP tests and code actions' tests
do."""

from __future__ import annotations

import sys
from pathlib import Path

from lsprotocol import types
from pytest_lsp import ClientServerConfig, LanguageClient, client_capabilities

from dg_lsp.lsp.server import STATS_COMMAND

ROOT = Path(__file__).resolve().parents[2]


def capabilities(preset: str = "neovim", encodings: list[str] | None = None):
    caps = client_capabilities(preset)
    # the presets predate LSP 3.18: declare inline completion as a 3.18 client does
    caps.text_document.inline_completion = types.InlineCompletionClientCapabilities()
    if encodings is not None:
        caps.general = types.GeneralClientCapabilities(position_encodings=encodings)
    return caps


async def start(model: Path | None, preset: str = "neovim", encodings: list[str] | None = None,
                options: dict | None = None) -> tuple[LanguageClient, types.InitializeResult]:
    command = [sys.executable, "-m", "dg_lsp.cli", "serve", "--engine", "inproc"]
    if model is not None:
        command += ["--model", str(model), "--device", "cpu"]
    client = await ClientServerConfig(server_command=command).start()
    # No workspace folder: the tests' documents are not in the checkout, whose index the
    # server would build for nothing (the index: tests/unit/test_lsp_repository.py).
    result = await client.initialize_session(types.InitializeParams(
        capabilities=capabilities(preset, encodings), initialization_options=options,
        root_uri=None))
    return client, result


async def stats(client: LanguageClient) -> dict:
    return await client.workspace_execute_command_async(
        types.ExecuteCommandParams(command=STATS_COMMAND))
