"""The Helix configuration in editors/helix/languages.toml: it parses, starts the installed
`dg-lsp` console script with a subcommand that serves LSP, and adds dg-lsp beside each
language's main server for completion and code actions only."""

from __future__ import annotations

import importlib.metadata
from pathlib import Path
from typing import Any

import pytest

from dg_lsp.cli import build_parser
from dg_lsp.lsp.server import serve
from dg_lsp.syntax.languages import language_for

tomllib = pytest.importorskip("tomllib", reason="tomllib is in the standard library from 3.11")

ROOT = Path(__file__).resolve().parents[2]
SNIPPET = ROOT / "editors" / "helix" / "languages.toml"
DG_LSP = {"name": "dg-lsp", "only-features": ["completion", "code-action"]}
# Helix language name -> the LSP language id Helix sends (its `language-id`, else the name).
HELIX_LANGUAGE_IDS = {"python": "python", "javascript": "javascript", "jsx": "javascriptreact",
                      "typescript": "typescript", "tsx": "typescriptreact", "rust": "rust",
                      "go": "go"}


def load() -> dict[str, Any]:
    with SNIPPET.open("rb") as f:
        return tomllib.load(f)


def test_command_is_the_console_script_and_serves_lsp():
    server = load()["language-server"]["dg-lsp"]
    with (ROOT / "pyproject.toml").open("rb") as f:
        scripts = tomllib.load(f)["project"]["scripts"]
    assert scripts[server["command"]] == "dg_lsp.cli:main"
    installed = {e.name: e.value
                 for e in importlib.metadata.entry_points(group="console_scripts")}
    assert installed.get(server["command"]) == "dg_lsp.cli:main"
    assert server["args"] == ["serve"]
    assert build_parser().parse_args(server["args"]).func is serve
    assert server["timeout"] == 60
    assert server["config"] == {}


def test_every_language_keeps_its_main_server_first_and_adds_dg_lsp_last():
    languages = {entry["name"]: entry["language-servers"] for entry in load()["language"]}
    assert set(languages) == set(HELIX_LANGUAGE_IDS)
    for name, servers in languages.items():
        *main, last = servers
        assert last == DG_LSP, name
        assert main and all(isinstance(s, str) and s != "dg-lsp" for s in main), name
        assert language_for(HELIX_LANGUAGE_IDS[name]) is not None, name
    assert languages["python"] == ["ty", "ruff", "jedi", "pylsp", DG_LSP]
    assert languages["go"] == ["gopls", "golangci-lint-lsp", DG_LSP]
