"""`dg-lsp bench --model`: a model that cannot load is refused before any section starts a
server (each would answer every request with nothing, and the tables would time no model)."""

from __future__ import annotations

from pathlib import Path

import pytest

from dg_lsp.cli import main


def test_a_missing_model_is_refused_with_its_name(tmp_path: Path,
                                                  capsys: pytest.CaptureFixture) -> None:
    missing = tmp_path / "no-such-model"
    assert main(["bench", "--section", "lsp", "--model", str(missing), "--limit", "1"]) == 2
    assert capsys.readouterr().err == f"dg-lsp bench: {missing}: no such checkpoint folder\n"


def test_a_folder_without_a_config_is_refused(tmp_path: Path,
                                              capsys: pytest.CaptureFixture) -> None:
    assert main(["bench", "--section", "lsp", "--model", str(tmp_path), "--limit", "1"]) == 2
    assert capsys.readouterr().err == f"dg-lsp bench: {tmp_path / 'config.json'}: file is missing\n"
