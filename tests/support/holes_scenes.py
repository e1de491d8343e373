"""Several holes at once in the real editors (tests/e2e/test_vscode_window.py,
tests/e2e/test_neovim_holes.py): the files the editors open, where their cursors go, and the
text the server must leave in the buffer, computed in this process through the same code the
server runs (dg_lsp.completion.cursors, dg_lsp.actions.holes) at the default settings."""

from __future__ import annotations

from dg_lsp.actions.holes import fill_edit, hole_targets
from dg_lsp.actions.targets import FILL_FUNCTION
from dg_lsp.completion.cursors import complete_at_cursors
from dg_lsp.document.parsed import ParsedText
from dg_lsp.settings import Settings
from dg_lsp.syntax.languages import language_for
from engine.backend import Backend

# "Complete at every cursor": a cursor at the end of each `self.… = ` line.
POINT = ("class Point:\n"
         "    def __init__(self, x, y):\n"
         "        self.x = \n"
         "        self.y = \n")
POINT_CURSORS = [(2, 17), (3, 17)]  # 0-based (line, character): the lines' ends
# "Fill every hole in this function": an Ellipsis statement and a `pass  # TODO`.
READ_LINES = """def read_lines(path):
    ...
    pass  # TODO: strip each line
    return lines
"""
READ_LINES_CURSOR = (1, 4)  # 0-based: on the `...`, inside the function


def offset(text: str, line: int, character: int) -> int:
    """The character offset of a 0-based (line, character) in an ASCII text."""
    return sum(len(row) + 1 for row in text.split("\n")[:line]) + character


def cursors_filled(backend: Backend, text: str, cursors: list[tuple[int, int]]) -> str:
    """`text` with each cursor's own completion written at it, as the editors apply the
    server's answer to `dg-lsp/fillHoles` (a cursor with nothing usable: left as it was)."""
    offsets = [offset(text, line, character) for line, character in cursors]
    doc = ParsedText(text, language_for("python"), uri="file:///scene.py")
    fills = complete_at_cursors(backend, doc, offsets, Settings()).suggestions
    for at, found in sorted(zip(offsets, fills, strict=True), reverse=True):
        if found is not None and found.text:
            text = text[:at] + found.text + text[at + found.replace:]
    return text


def function_filled(backend: Backend, text: str, cursor: tuple[int, int]) -> str:
    """`text` after "Fill every hole in this function" at `cursor`; RewriteError when the
    server would refuse it."""
    doc = ParsedText(text, language_for("python"), uri="file:///scene.py")
    at = offset(text, *cursor)
    (target,) = [t for t in hole_targets(doc, at, at) if t.action == FILL_FUNCTION]
    edit = fill_edit(backend, doc, target, Settings())
    return text[:edit.start] + edit.text + text[edit.end:]
