"""An edit of a document, and why none is offered: what every feature that changes text
returns (code actions, fills, batch mode) or raises."""

from __future__ import annotations

from dataclasses import dataclass, field


class RewriteError(Exception):
    """Why an action produced no edit; the message is shown to the user as it is."""


@dataclass
class Edit:
    start: int  # replace text[start:end] of the document it was computed for
    end: int
    text: str
    steps: int  # forward passes the model ran
    # The same edit as separate (start, end, text) replacements, where it is made of several
    # (the fills of stub holes, dg_lsp.actions.holes): an editor gets one TextEdit each.
    parts: list[tuple[int, int, str]] = field(default_factory=list)


def spliced(text: str, parts: list[tuple[int, int, str]], start: int = 0,
            end: int | None = None) -> str:
    """text[start:end] with each (part start, part end, new text) of `parts` (in document
    order, not overlapping, inside [start, end]) in place: one join, where replacing them one
    by one copied the whole text once per part."""
    pieces, at = [], start
    for part_start, part_end, new in parts:
        pieces += [text[at:part_start], new]
        at = part_end
    pieces.append(text[at:end])
    return "".join(pieces)
