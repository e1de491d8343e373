"""The rules every feature applies before it offers text: a document it may serve, and an
edit that parses no worse, names nothing the file never mentions and is no loop.

Completions (dg_lsp.completion.postprocess), next edits (dg_lsp.next_edit.suggest), code
actions and fills (dg_lsp.actions) and batch mode all ask here, so a rule changes in one place.
The confidence gate, the other rule they share, is dg_lsp.document.gate.
"""

from __future__ import annotations

import re

from dg_lsp.document.parsed import ParsedText
from dg_lsp.syntax import names
from dg_lsp.syntax.errors import count_errors

# Past this, no edit is offered: each would parse the whole document (on the server's event
# loop, where tree-sitter holds the GIL). A completion reads only a window around the cursor
# and has no such bound.
MAX_DOCUMENT_CHARS = 5_000_000

# Four copies in a row of a short piece that starts with a name
# (`math.pi * math.pi * math.pi * math.pi`, `the file the file the file the file`): a small
# model's loop, never what the author writes (a row of zeros is not one).
STUTTER = re.compile(r"((?=[A-Za-z_])[^\n]{2,30}?)\1{3,}")


def unservable(text: str) -> str | None:
    """Why no edit is offered in a document of `text`, or None: it may be served."""
    if len(text) > MAX_DOCUMENT_CHARS:
        return f"it is too large ({len(text)} characters, at most {MAX_DOCUMENT_CHARS})"
    if "\x00" in text:
        return "it is binary"
    return None


def stutters(text: str) -> bool:
    """Whether `text` repeats a short piece with a name in it four times in a row."""
    return STUTTER.search(text) is not None


def parses_no_worse(edited: ParsedText, allowed: int) -> bool:
    """Whether the edited document has at most `allowed` syntax errors (the document's own
    count, or fewer for a fix)."""
    return count_errors(edited.tree) <= allowed


def unknown_names(doc: ParsedText, edited: ParsedText, start: int, text: str,
                  known: str | None = None) -> list[str]:
    """The names `text`, put in at character `start` of `doc` (giving `edited`), uses that
    `known` (default: the document's text) never mentions (dg_lsp.syntax.names)."""
    if doc.language is None:
        return []
    first = doc.byte(start)
    return names.unknown_names(doc.language, edited.tree, first,
                               first + len(text.encode("utf-8")),
                               doc.text if known is None else known)
