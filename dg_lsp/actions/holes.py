"""Fill every stub hole of a function, or of a selection, in one request.

The stubs (dg_lsp.actions.stubs) become the holes of one canvas: the code before the first,
a hole, the code kept between it and the next, a hole, ..., the code after the last
(engine.types.HolesRequest). The model denoises them together, each seeing the others' text
as it forms. A stub's TODO / FIXME comment is read on its own line above its hole, as the
instruction of a rewrite is.

Each hole is sized by what it stands for: a statement stub a few lines (STATEMENT_TOKENS), the
stub that is a function's whole body a body (BODY_TOKENS); each ends at the first line that
leaves its block. The fills make one edit, every stub line replaced by its fill (its first
line at the stub's indentation, the model's own indentation after it), or none: a fill that is
empty, still a stub, or that adds syntax errors (alone or with the others) refuses the whole
edit with the hole's line and the reason.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

from dg_lsp.actions.rewrite import compute_edit
from dg_lsp.actions.stubs import BODY, Stub, stubs_in
from dg_lsp.actions.targets import BODY_TOKENS, FILL_FUNCTION, FILL_SELECTION, Target
from dg_lsp.context import detect_indent_unit
from dg_lsp.document import accept, gate
from dg_lsp.document.edit import Edit, RewriteError, spliced
from dg_lsp.document.holes import MAX_HOLE_TOKENS, MAX_HOLES, canvas_texts, filled
from dg_lsp.document.parsed import ParsedText
from dg_lsp.settings import Settings
from engine.backend import Backend
from engine.text.stops import cut_at_special
from engine.text.units import BLOCK, trim_block
from engine.types import HolesRequest, UnitEnd

FILL_ACTIONS = (FILL_FUNCTION, FILL_SELECTION)
STATEMENT_TOKENS = 32  # a statement stub: a line or a few
# The most holes, and masked tokens in all, one request asks for: the engine's bounds.


def hole_targets(doc: ParsedText, start: int, end: int) -> list[Target]:
    """The fill actions at the selection [start, end) (a cursor when equal): every hole of the
    innermost function around `start` that has one, and every hole the selection meets. A lone
    stub that is a whole body is "Complete function body"'s: no fill action is offered for it."""
    found = []
    # Only the functions around the cursor, and their stubs, are looked at: editors ask on
    # every cursor move, in files of any size.
    around = sorted((doc.span(node) for kind, node, body, _ in doc.definitions(start=start,
                                                                              end=start)
                     if kind == "function" and body is not None),
                    key=lambda span: span[1] - span[0])
    stubs = stubs_in(doc, *around[-1]) if around else []
    for a, b in around:
        inside = [s for s in stubs if a <= s.start and s.end <= b]
        if inside:
            if not _body_only(inside):
                found.append(_target(FILL_FUNCTION, inside))
            break
    selected = ([s for s in stubs_in(doc, start, end) if s.start < end and start < s.end]
                if end > start else [])
    if selected and not _body_only(selected):
        found.append(_target(FILL_SELECTION, selected))
    return found


def _body_only(stubs: list[Stub]) -> bool:
    return len(stubs) == 1 and stubs[0].size == BODY


def all_hole_targets(doc: ParsedText, start: int = 0, end: int | None = None
                     ) -> list[Target]:
    """One target per outermost function holding holes (those meeting [start, end], default
    the whole document), in document order: `dg-lsp fill`, batch mode."""
    groups: dict[tuple[int, int], list[Stub]] = {}
    for stub in stubs_in(doc, start, len(doc.text) if end is None else end):
        groups.setdefault(stub.outer, []).append(stub)
    return [_target(FILL_FUNCTION, stubs) for _, stubs in sorted(groups.items())]


def action_edit(backend: Backend, doc: ParsedText, target: Target, settings: Settings,
                instruction: str | None = None, strength: float | None = None,
                cancel: Callable[[], bool] | None = None) -> Edit:
    """The checked edit of any action's target: the fill actions here, the others in
    dg_lsp.actions.rewrite.compute_edit; RewriteError when there is none to offer."""
    if target.action in FILL_ACTIONS:
        return fill_edit(backend, doc, target, settings, cancel)
    return compute_edit(backend, doc, target, settings, instruction, strength, cancel)


def fill_edit(backend: Backend, doc: ParsedText, target: Target, settings: Settings,
              cancel: Callable[[], bool] | None = None) -> Edit:
    """Every hole in the target's span filled in one request, as one edit."""
    if (why := accept.unservable(doc.text)) is not None:
        raise RewriteError(f"no edit is offered in this document: {why}")
    stubs = stubs_in(doc, target.start, target.end)
    if not stubs:
        raise RewriteError("there is no hole to fill here")
    last = filled(backend, holes_request(doc, stubs, settings), cancel, doc.uri, "holes")
    if (reason := gate.refusal(last.score, settings.min_edit_confidence)) is not None:
        raise RewriteError(reason)
    parts = checked_fills(doc, stubs, last.holes)
    text = spliced(doc.text, parts, target.start, target.end)
    return Edit(target.start, target.end, text, last.step, parts)


def holes_request(doc: ParsedText, stubs: list[Stub], settings: Settings) -> HolesRequest:
    """The canvas of `stubs`' holes; RewriteError when there are too many, or the holes and
    the code between them do not fit the canvas."""
    sizes = tuple(BODY_TOKENS if s.size == BODY else STATEMENT_TOKENS for s in stubs)
    if len(stubs) > MAX_HOLES:
        raise RewriteError(f"{len(stubs)} holes: at most {MAX_HOLES} are filled at once")
    if sum(sizes) > MAX_HOLE_TOKENS:
        raise RewriteError(f"the holes would take {sum(sizes)} tokens: at most "
                           f"{MAX_HOLE_TOKENS} are filled at once")
    unit = detect_indent_unit(doc.text, doc.language)
    texts = canvas_texts(doc.text, [(s.start, s.end, _note_line(s)) for s in stubs],
                         settings.canvas_length, sum(sizes), settings.suffix_fraction)
    until = tuple(UnitEnd(BLOCK, s.indent, _outer_indent(s.indent, unit)) for s in stubs)
    sampler = replace(settings.sampler, share_prefix=False)
    return HolesRequest(texts, sizes, sampler, settings.canvas_length,
                        settings.suffix_fraction, until)


def checked_fills(doc: ParsedText, stubs: list[Stub], raw: tuple[str, ...]
                  ) -> list[tuple[int, int, str]]:
    """(start, end, fill) of each stub; RewriteError naming the first hole whose fill is
    empty, still a stub or adds syntax errors (or the fills together, where they do)."""
    before = doc.errors
    unit = detect_indent_unit(doc.text, doc.language)
    parts = []
    for stub, written in zip(stubs, raw, strict=True):
        fill = shape_fill(written, stub.indent, _outer_indent(stub.indent, unit))
        if not fill:
            raise RewriteError(f"the model wrote nothing for the hole at {stub.where}")
        alone = ParsedText(doc.text[: stub.start] + fill + doc.text[stub.end :], doc.language,
                           uri=doc.uri)
        if not accept.parses_no_worse(alone, before):
            raise RewriteError(f"the fill for the hole at {stub.where} does not parse: "
                               f"`{fill.splitlines()[0][:60]}`")
        filled_to = stub.start + len(fill)
        if any(stub.start <= s.start < filled_to
               for s in stubs_in(alone, stub.start, filled_to)):
            raise RewriteError(f"the model left the hole at {stub.where} a stub")
        parts.append((stub.start, stub.end, fill))
    if not accept.parses_no_worse(ParsedText(spliced(doc.text, parts), doc.language), before):
        raise RewriteError("the fills do not parse together")
    return parts


def shape_fill(written: str, indent: str, outer: str) -> str:
    """A hole's text as it replaces a stub at `indent`: up to the first line that leaves the
    stub's block (dedented to `outer` or less), blank lines around it dropped, its first line
    with no indentation of its own (it follows the stub's)."""
    text = trim_block(cut_at_special(written), indent, outer)
    return text.strip("\n").lstrip(" \t").rstrip()


def _target(action: str, stubs: list[Stub]) -> Target:
    return Target(action, stubs[0].start, stubs[-1].end, name=stubs[0].function,
                  max_tokens=sum(BODY_TOKENS if s.size == BODY else STATEMENT_TOKENS
                                 for s in stubs))


def _note_line(stub: Stub) -> str:
    """What the model reads before the stub's hole: its comment on a line of its own."""
    return f"{stub.note}\n{stub.indent}" if stub.note else ""


def _outer_indent(indent: str, unit: str) -> str:
    """The indentation of the block holding a line indented by `indent`."""
    return indent[: -len(unit)] if unit and indent.endswith(unit) else indent[:-1]
