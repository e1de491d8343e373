"""Unit tests: no process of the project's own (server, engine, command, Python child, fork) and
no socket; the loop a developer runs between edits. git may run: batch discovery runs it itself,
and `git apply` is the patch tests' oracle."""
