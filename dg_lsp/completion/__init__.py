"""Completions, knowing nothing of LSP: the pipeline (context, engine, post-processing), the
cache of suggestions still valid while typing, and the confidence gate."""
