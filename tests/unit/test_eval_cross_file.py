"""`dg-lsp eval --suite cross-file`: which cursors are cross-file, and what a run reports."""

from __future__ import annotations

from dg_lsp.measure.eval import cross_file
from dg_lsp.repository.index import RepositoryIndex
from tests.support.scripted import Scripted


def test_a_rest_naming_another_files_definition_is_cross_file_the_others_control(tmp_path):
    (tmp_path / "config.py").write_text("def load_config(path):\n    return dict(path=path)\n")
    (tmp_path / "main.py").write_text("def run(name):\n    value = load_config(name)\n"
                                      "    total = len(name)\n    return total\n")
    index = RepositoryIndex(tmp_path)
    index.build()
    found = {(c.path, c.truth): c.kind for c in cross_file.cursors(tmp_path, index, 10, 0)}
    assert found[("main.py", "load_config(name)")] == cross_file.CROSS_FILE
    assert found[("main.py", "len(name)")] == cross_file.CONTROL
    assert found[("config.py", "path=path)")] == cross_file.CONTROL


def test_a_run_reports_each_class_off_and_on(tmp_path):
    (tmp_path / "config.py").write_text("def load_config(path):\n    return dict(path=path)\n")
    (tmp_path / "main.py").write_text("def run(name):\n    value = load_config(name)\n")
    rows = cross_file.run([tmp_path], Scripted(*["load_config(name)"] * 20), 1, 0)
    assert [(r["cursors"], r["context"], r["count"]) for r in rows] == [
        (kind, context, 1) for context in ("off", "choices", "choices+snippets", "all")
        for kind in ("cross-file", "control")]
