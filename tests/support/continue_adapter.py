"""Continue's published adapter package from npm (`@continuedev/openai-adapters`), installed once
into the user's cache and driven by tests/support/continue_adapter.mjs under Node.js."""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

PACKAGE = "@continuedev/openai-adapters"
VERSION = "1.37.0"  # pinned: the calls the tests make are this version's
SCRIPT = Path(__file__).with_name("continue_adapter.mjs")
CACHE = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "dg-lsp" / \
    f"continue-adapters-{VERSION}"
# npm's words for a registry it cannot reach: then the test skips rather than fails.
OFFLINE = ("ENOTFOUND", "EAI_AGAIN", "ECONNREFUSED", "ETIMEDOUT", "ECONNRESET", "ENETUNREACH",
           "network request")


def installed_adapter() -> Path:
    """The folder whose node_modules holds the package; installed there the first time. Skips
    the test, saying why, without Node.js 18 or later and npm, or without the registry."""
    node, npm = shutil.which("node"), shutil.which("npm")
    if node is None or npm is None:
        pytest.skip("Continue's adapter package needs Node.js 18 or later and npm")
    major = subprocess.run([node, "--version"], capture_output=True, text=True, timeout=30)
    if int(major.stdout.strip().lstrip("v").split(".")[0]) < 18:
        pytest.skip(f"Continue's adapter package needs Node.js 18 or later, not {major.stdout}")
    CACHE.mkdir(parents=True, exist_ok=True)
    # The suite's workers (pytest -n) may ask at once: one installs, the others wait for it.
    with (CACHE / ".install.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        return _install(npm)


def _install(npm: str) -> Path:
    manifest = CACHE / "node_modules" / PACKAGE / "package.json"
    if manifest.exists() and json.loads(manifest.read_text())["version"] == VERSION:
        return CACHE
    result = subprocess.run(
        [npm, "install", "--prefix", str(CACHE), "--no-audit", "--no-fund", "--ignore-scripts",
         f"{PACKAGE}@{VERSION}"], capture_output=True, text=True, timeout=600)
    if result.returncode != 0:
        said = result.stdout + result.stderr
        if any(word in said for word in OFFLINE):
            pytest.skip(f"npm cannot reach its registry to install {PACKAGE}: {said[-300:]}")
        pytest.fail(f"npm install {PACKAGE}@{VERSION} failed:\n{said[-3000:]}")
    return CACHE


def adapter_call(folder: Path, config: dict[str, Any], call: str, body: dict[str, Any],
                 env: dict[str, str] | None = None) -> list[str]:
    """The text of each chunk the adapter built from `config` yields for `call` with `body`
    (one piece for completionNonStream)."""
    result = subprocess.run(["node", str(SCRIPT), str(folder)], capture_output=True, text=True,
                            timeout=120, cwd=folder, env={**os.environ, **(env or {})},
                            input=json.dumps({"config": config, "call": call, "body": body}))
    assert result.returncode == 0, result.stderr[-3000:]
    return json.loads(result.stdout)["pieces"]
