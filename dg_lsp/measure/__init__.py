"""Measuring: `dg-lsp bench` and its sections, `dg-lsp eval`, the gate's calibrator fit."""
