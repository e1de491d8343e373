"""The models and their checkpoints: config, weights on disk, the memory they need, networks."""

from pathlib import Path

# The models shipped inside the package (package data: found the same in a wheel and a
# checkout). Here, not in .checkpoint, so that naming them imports no torch: a command that
# runs no model (`dg-lsp fill --check`) starts in a second less.
BUNDLED_MODELS = Path(__file__).resolve().parents[1] / "bundled"
