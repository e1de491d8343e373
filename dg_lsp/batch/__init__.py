"""Batch mode: one infill action over every file of a repository, as one patch.

- job: the work on one file (its targets, their edits, merged into one text)
- cli: `dg-lsp batch` (the resident engine, an in-process one, or Ray), the patch and report
- on_ray: the files spread over a Ray cluster (`dg-lsp batch --ray`)
"""
