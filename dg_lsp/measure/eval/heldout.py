"""Held-out third-party code for `dg-lsp bench`: a pinned PyPI package no model here trained on.

more-itertools is pure Python written by people outside this project, is not a dependency of
torch or transformers (the packages the bundled models' corpus was gathered beside), and the
corpus builder refuses it by name (engine.train.corpus.BENCHMARK_PACKAGES), so no later model
trains on it either. Its wheel is fetched once with pip (from the package index pip is set up
for) and its sources kept in the user's cache.
"""

from __future__ import annotations

from pathlib import Path

from engine.data.releases import cache_root, fetch_sources, release_pairs, versions_cache
from engine.train.corpus import BENCHMARK_PACKAGES

PACKAGE, VERSION = "more-itertools", "10.5.0"
# A second package the distilled model is judged on (scripts/experiments/distill_eval.py):
# pure Python, no dependency of torch or transformers, refused by the corpus builder too.
SECOND_PACKAGE, SECOND_VERSION = "boltons", "26.2.0"
# A third, for the confidence gate's per-package curves (scripts/experiments/gate_packages.py):
# functional helpers in several modules, pure Python, no dependency of torch or transformers.
THIRD_PACKAGE, THIRD_VERSION = "toolz", "1.0.0"
HELDOUT_PACKAGES = ((PACKAGE, VERSION), (SECOND_PACKAGE, SECOND_VERSION),
                    (THIRD_PACKAGE, THIRD_VERSION))
assert all(name.replace("-", "_") in BENCHMARK_PACKAGES for name, _ in HELDOUT_PACKAGES)


def cache_dir() -> Path:
    return cache_root() / "heldout"


def heldout_sources(cache: Path | None = None, package: str = PACKAGE,
                    version: str = VERSION) -> Path:
    """The folder of a pinned package's Python sources (the bench's by default), fetched on
    first use (engine.data.releases: its wheel, with pip).

    Raises OSError with the reason (and what to do) when pip cannot fetch it."""
    folder = (cache or cache_dir()) / f"{package}-{version}"
    try:
        return fetch_sources(package, version, folder)
    except OSError as exc:
        raise OSError(f"{exc}; pass --cases-from a folder of Python sources instead") from exc


# Consecutive releases of the held-out packages whose differences hold real next-edit cases
# (`dg-lsp eval --suite next-edit`, class "real"): the pairs that have some (many releases,
# 10.4.0 -> 10.5.0 among them, change no span the server asks about after the edit before).
REAL_EDIT_PAIRS = (
    ("more-itertools", "10.2.0", "10.3.0"),
    ("more-itertools", "10.6.0", "10.7.0"),
    ("more-itertools", "10.7.0", "10.8.0"),
    ("more-itertools", "10.8.0", "11.0.0"),
    ("more-itertools", "11.1.0", "11.2.0"),
    ("boltons", "23.1.1", "24.0.0"),
    ("boltons", "24.0.0", "24.1.0"),
)


def heldout_release_pairs(cache: Path | None = None) -> list[tuple[str, str]]:
    """(old text, new text) of each Python file that changed between the releases of
    REAL_EDIT_PAIRS, fetched on first use into `cache` (default: ~/.cache/dg-lsp/versions).

    Raises OSError with the reason when pip cannot fetch one."""
    root = cache or versions_cache()
    pairs = []
    for package, older, newer in REAL_EDIT_PAIRS:
        _, _, files = release_pairs(package, [older, newer], root)[0]
        pairs += [(old, new) for _, old, new in files]
    return pairs
