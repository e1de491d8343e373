"""Packaging that pyproject.toml cannot state: the tree-sitter queries live at the repository's
top (`grammars/<lang>/*.scm`) and are installed as `dg_lsp/grammars/`, where
dg_lsp.syntax.languages looks first (a checkout reads them from `grammars/` directly)."""

from setuptools import find_namespace_packages, setup

setup(
    packages=find_namespace_packages(include=["dg_lsp*", "engine*"]) + ["dg_lsp.grammars"],
    package_dir={"dg_lsp.grammars": "grammars"},
)
