"""Unit tests: no process, no socket; the loop a developer runs between edits."""
