"""The VS Code extension in editors/vscode builds and passes its own tests.

`npm ci && npm run build && npm test`, then `npm run package`, as the extension's README says:
the unit tests of its settings mapping, status bar text, rewrite arguments and next-edit
decisions, an end-to-end test that drives this package's `dg-lsp serve --engine inproc` (one
process, the bundled model on the CPU) through vscode-languageserver-protocol (a completion, a
rewrite, a next edit), and the `.vsix` users install. Skipped, with the reason, where npm is
missing.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import sys
import zipfile
from pathlib import Path

import pytest

from tests.support.vscode import ROOT, VSCODE, run

# npm in editors/vscode, as test_vscode_window.py: tests/support/vscode.py runs one at a time.
pytestmark = pytest.mark.e2e  # its tests drive a real server

UNIT_TESTS, E2E_TESTS = 31, 4


def test_vscode_extension_builds_and_passes_its_tests(tmp_path: Path):
    npm = shutil.which("npm")
    if npm is None:
        print("SKIP reason: npm is not installed (Node.js 20 or later)")
        pytest.skip("npm is not installed (Node.js 20 or later)")
    env = dict(os.environ,
               DG_LSP_COMMAND=json.dumps([sys.executable, "-m", "dg_lsp.cli"]),
               PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT),
                                                        os.environ.get("PYTHONPATH")])),
               OMP_NUM_THREADS="1", npm_config_audit="false", npm_config_fund="false",
               XDG_RUNTIME_DIR=str(tmp_path))
    run([npm, "ci"], env, timeout=600)
    run([npm, "run", "build"], env, timeout=300)
    output = run([npm, "test"], env, timeout=600)
    summary = dict(re.findall(r"^# (tests|pass|fail|skipped|cancelled) (\d+)$", output, re.M))
    assert summary == {"tests": str(UNIT_TESTS + E2E_TESTS), "pass": str(UNIT_TESTS + E2E_TESTS),
                       "fail": "0", "skipped": "0", "cancelled": "0"}, output[-6000:]
    # the server loaded the model itself: no resident engine was started
    assert not (tmp_path / "dg-engine").exists()

    # The package users install (`code --install-extension dg-lsp-VERSION.vsix`).
    version = json.loads((VSCODE / "package.json").read_text())["version"]
    vsix = VSCODE / f"dg-lsp-{version}.vsix"
    vsix.unlink(missing_ok=True)
    run([npm, "run", "package"], env, timeout=300)
    with zipfile.ZipFile(vsix) as package:
        names = {name.lower() for name in package.namelist()}  # vsce writes readme.md
    vsix.unlink()
    assert {"extension/package.json", "extension/out/src/extension.js",
            "extension/readme.md", "extension/media/vscode-ghost-text.png"} <= names
    assert not any(name.startswith("extension/src/") for name in names)  # sources stay out
