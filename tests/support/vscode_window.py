"""Driving VS Code in the window (tests/e2e/test_vscode_window.py): waiting on what the page
shows, the Command Palette, Go to Line, and the several-holes step (tests/support/holes_scenes.py)
as a person does it."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tests.support.holes_scenes import POINT_CURSORS, READ_LINES_CURSOR


def poll(what: str, ready: Callable[[], Any], timeout: float = 60) -> Any:
    """ready()'s first true value; TimeoutError (which ends a window step) after `timeout` s."""
    deadline = time.monotonic() + timeout
    while True:
        value = ready()
        if value:
            return value
        if time.monotonic() > deadline:
            raise TimeoutError(f"{what}: not within {timeout} s")
        time.sleep(0.1)


def palette(page: Any, title: str) -> None:
    """A command run from the Command Palette, as a person does it."""
    page.keyboard.press("F1")
    page.wait_for_selector(".quick-input-widget input")
    page.keyboard.type(title)
    poll(f"{title} in the palette", lambda: title in page.inner_text(".quick-input-list"))
    page.keyboard.press("Enter")


def go_to_line(page: Any, line: int) -> None:
    """Ctrl+G to the start of `line` (1-based), until the status bar shows it there and the
    input box is gone (keys pressed sooner may go to the closing box)."""
    page.keyboard.press("Control+g")
    page.keyboard.type(str(line))
    page.keyboard.press("Enter")
    poll(f"line {line} reached", lambda: not page.is_visible(".quick-input-widget")
         and f"Ln {line}, Col 1" in page.inner_text(".statusbar"))


def fill_holes(page: Any, folder: Path, open_file: Callable[[str, str], None],
               editor_text: Callable[[], str], save_and_read: Callable[[Path], str],
               shot: Callable[[str], None], result: dict[str, Any]) -> None:
    """A cursor at the end of each of point.py's `self.… = ` lines, "Complete at every
    cursor"; then read_lines.py's stubs filled by the code action picked from Ctrl+.'s menu."""
    open_file("point.py", "class Point")
    (first, _), (last, _) = POINT_CURSORS[0], POINT_CURSORS[-1]
    go_to_line(page, first + 1)
    for _ in range(last - first):
        page.keyboard.press("Shift+ArrowDown")
    page.keyboard.press("Shift+End")
    palette(page, "Add Cursors to Line Ends")
    poll("a cursor at each line's end", lambda: len(page.query_selector_all(
        ".monaco-editor .cursors-layer .cursor")) == len(POINT_CURSORS), timeout=10)
    before = editor_text()
    palette(page, "dg-lsp: Complete at every cursor")
    poll("the cursors completed", lambda: editor_text() != before, timeout=180)
    page.keyboard.press("Escape")  # one cursor again
    result["cursors_filled"] = save_and_read(folder / "point.py")

    open_file("read_lines.py", "def read_lines")
    go_to_line(page, READ_LINES_CURSOR[0] + 1)
    # Ctrl+. again while no menu comes, as a person would press it again: about one first
    # press in three showed none (no light bulb either) although the server had answered
    # VS Code's request with the action. The misses are kept.
    row = ".action-widget .monaco-list-row:has-text('Fill every hole in this function')"
    result["menu_misses"] = 0
    while True:
        page.keyboard.press("Control+.")
        try:
            poll("the fill action in the menu", lambda: page.query_selector(row), timeout=10)
            break
        except TimeoutError:
            result["menu_misses"] += 1
            page.screenshot(path=str(folder.parent / f"menu-miss-{result['menu_misses']}.png"))
            if result["menu_misses"] == 3:
                raise
            page.keyboard.press("Escape")
    before = editor_text()
    page.click(row)
    poll("the holes filled", lambda: editor_text() != before, timeout=180)
    shot("holes")
    result["function_filled"] = save_and_read(folder / "read_lines.py")
