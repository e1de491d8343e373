"""Where the repository and its bundled model are, for tests at any depth."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
BUNDLED = ROOT / "engine" / "bundled" / "default"
