"""A completion at every cursor, each cursor's own, written together in one canvas.

An editor with several cursors asks once (`dg-lsp/fillHoles`, the editors' "Complete at every
cursor"): every cursor is a hole of one HolesRequest (engine.types), so each cursor's text
sees the others' as it forms. Each hole is what a completion at that cursor would be: its hole
kind, size and unit end (dg_lsp.context, dg_lsp.completion.postprocess), and its text goes
through the same post-processing (cut to the unit, re-indented, checked to parse, names
known). A cursor with nothing usable gets None; the others keep theirs.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from dg_lsp.completion.postprocess import Suggestion, postprocess, unit_end
from dg_lsp.context import build_context, char_budget
from dg_lsp.document.edit import RewriteError
from dg_lsp.document.holes import MAX_HOLE_TOKENS, MAX_HOLES, canvas_texts, filled
from dg_lsp.document.parsed import ParsedText
from dg_lsp.settings import Settings
from engine.backend import Backend
from engine.types import HolesRequest


@dataclass
class CursorFills:
    suggestions: list[Suggestion | None]  # one per cursor, in the order they were given
    steps: int  # forward passes of the one request


def complete_at_cursors(backend: Backend, doc: ParsedText, offsets: list[int],
                        settings: Settings, cancel: Callable[[], bool] | None = None
                        ) -> CursorFills:
    """Each cursor's completion at character `offsets` of the document (cursors at the same
    place share one); RewriteError when the cursors cannot be filled together."""
    places = sorted(set(offsets))
    if not places:
        return CursorFills([], 0)
    if len(places) > MAX_HOLES:
        raise RewriteError(f"{len(places)} cursors: at most {MAX_HOLES} are completed at once")
    largest = max(settings.hole_size.values())
    contexts = [build_context(doc.text, at, doc.language,
                              char_budget(settings.canvas_length, largest),
                              settings.suffix_fraction) for at in places]
    sizes = tuple(settings.hole_size[ctx.kind] for ctx in contexts)
    if sum(sizes) > MAX_HOLE_TOKENS:
        raise RewriteError(f"the cursors' holes would take {sum(sizes)} tokens: at most "
                           f"{MAX_HOLE_TOKENS} are filled at once")
    texts = canvas_texts(doc.text, [(at, at, "") for at in places], settings.canvas_length,
                         sum(sizes), settings.suffix_fraction)
    request = HolesRequest(texts, sizes, settings.sampler, settings.canvas_length,
                           settings.suffix_fraction, tuple(unit_end(ctx) for ctx in contexts))
    last = filled(backend, request, cancel, doc.uri, "cursors")
    found = {at: postprocess(raw, ctx) for at, raw, ctx in zip(places, last.holes, contexts,
                                                               strict=True)}
    return CursorFills([found[at] for at in offsets], last.step)
