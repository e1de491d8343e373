"""Batch mode: one infill action over every file of a repository, as one patch.

- cli: `dg-lsp batch`: its arguments and the run's course
- plan: the files found and read, their targets; runners: the targets run on the resident
  engine, an in-process one, a team's or Ray; report: the files written, patch, report, progress
- job: the work on one file (its targets, their edits, merged into one text)
- on_ray: the files spread over a Ray cluster (`dg-lsp batch --ray`)
"""
