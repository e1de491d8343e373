"""Held-out third-party code for `dg-lsp bench`: a pinned PyPI package no model here trained on.

more-itertools is pure Python written by people outside this project, is not a dependency of
torch or transformers (the packages the bundled models' corpus was gathered beside), and the
corpus builder refuses it by name (engine.train.corpus.BENCHMARK_PACKAGES), so no later model
trains on it either. Its wheel is fetched once with pip (from the package index pip is set up
for) and its sources kept in the user's cache.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

from engine.train.corpus import BENCHMARK_PACKAGES

PACKAGE, VERSION = "more-itertools", "10.5.0"
# A second package the distilled model is judged on (scripts/experiments/distill_eval.py):
# pure Python, no dependency of torch or transformers, refused by the corpus builder too.
SECOND_PACKAGE, SECOND_VERSION = "boltons", "26.2.0"
assert PACKAGE.replace("-", "_") in BENCHMARK_PACKAGES
assert SECOND_PACKAGE in BENCHMARK_PACKAGES


def cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "dg-lsp" / "heldout"


def heldout_sources(cache: Path | None = None, package: str = PACKAGE,
                    version: str = VERSION) -> Path:
    """The folder of a pinned package's Python sources (the bench's by default), fetched on
    first use.

    Raises OSError with the reason (and what to do) when pip cannot fetch it."""
    folder = (cache or cache_dir()) / f"{package}-{version}"
    if (folder / ".complete").exists():
        return folder
    with tempfile.TemporaryDirectory() as download:
        command = [sys.executable, "-m", "pip", "download", "--quiet", "--no-deps",
                   "--only-binary", ":all:", "--dest", download, f"{package}=={version}"]
        run = subprocess.run(command, capture_output=True, text=True, timeout=300)
        wheels = list(Path(download).glob("*.whl"))
        if run.returncode != 0 or not wheels:
            why = run.stderr.strip()[-300:]
            raise OSError(f"cannot fetch {package}=={version} with pip ({why}); pass "
                          "--cases-from a folder of Python sources instead")
        folder.mkdir(parents=True, exist_ok=True)
        with zipfile.ZipFile(wheels[0]) as wheel:
            for name in wheel.namelist():
                if name.endswith(".py") and ".dist-info/" not in name:
                    wheel.extract(name, folder)
    (folder / ".complete").touch()
    return folder
