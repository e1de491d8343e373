"""Run an action's target through the engine and turn what it writes into a checked edit.

The one edit path for code actions, `dg-lsp rewrite` and batch mode:

1. the model reads the document around the target's hole (whole-line windows within the
   canvas budget), with the target's own framing (`Target.before` / `.after`), and for an
   instructed rewrite the instruction as a comment on its own line above the hole's line —
   a form every code model has read in its training data ("# make this iterative"), which
   needs no prompt template and works for infill-only models;
2. selections are rewritten at an edit strength (share of their tokens generated again,
   DEFAULT_STRENGTH unless asked); stubs and doc comments are generated afresh;
3. the text is shaped for its place (docstring quotes, body indentation) and the edited
   document is parsed: an edit that adds syntax errors is cut back to its longest prefix of
   whole lines that does not, and refused when none does (a syntax fix must remove errors);
4. an edit that changes what nobody asked to change is refused: one that uses a name the file
   never defines or imports (dg_lsp.syntax.names; a name the instruction mentions counts as known),
   or renames a definition in the selection or drops or renames its parameters when the
   instruction does not ask for it (dg_lsp.actions.signature), and one that loops (a short piece
   four times in a row, dg_lsp.document.accept.stutters) where the original did not.
   An edit the model wrote with a token it was less sure of than `minEditConfidence` is refused
   before any of this (dg_lsp.document.gate: "the model is not confident in this edit (0.31 <
   0.45)").
   A refused edit raises RewriteError with the reason; nothing is ever half applied.
"""

from __future__ import annotations

import textwrap
from collections.abc import Callable
from dataclasses import replace

from dg_lsp.actions import signature
from dg_lsp.actions.targets import COMPLETE_BODY, DOCSTRING, FIX_SYNTAX, Target, is_docstring
from dg_lsp.context import char_budget, windows
from dg_lsp.document import accept, gate
from dg_lsp.document.edit import Edit, RewriteError
from dg_lsp.document.parsed import ParsedText
from dg_lsp.settings import Settings
from dg_lsp.syntax import names
from engine.backend import Backend
from engine.bounds import STRENGTH_RANGE
from engine.text.units import bracket_depths, indent_width, leading_indent
from engine.types import InfillRequest, RewriteRequest, Score, last_draft

# Keep the half of a selection the model is surest of and write the rest again.
DEFAULT_STRENGTH = 0.5
# A body or a doc comment is not empty: no stop token in its first few positions.
MIN_TOKENS = {COMPLETE_BODY: 4, DOCSTRING: 2}
# A body the first decoding leaves unusable (an unclosed docstring, a stop after `return
# math.`) is written once more with every pass exact (the context's keys and values computed
# afresh, not reused from a cached pass) and no stop in its first six tokens: on held-out
# stubs the second try offers a body at more functions, about as close to the authors' as
# the first try's bodies (docs/usage.md, "Code actions"; scripts/experiments/body_action.py).
BODY_RETRY = {"cache_refresh": 1, "min_tokens": 6}


def compute_edit(
    backend: Backend,
    doc: ParsedText,
    target: Target,
    settings: Settings,
    instruction: str | None = None,
    strength: float | None = None,
    cancel: Callable[[], bool] | None = None,
) -> Edit:
    """The checked edit for `target` in `doc`; RewriteError when there is none to offer."""
    if (why := accept.unservable(doc.text)) is not None:
        raise RewriteError(f"no edit is offered in this document: {why}")
    strength = DEFAULT_STRENGTH if strength is None else strength
    if problem := STRENGTH_RANGE.problem("strength", strength):
        raise RewriteError(problem)
    before = doc.errors
    steps = 0
    unasked = None  # why the last parseable edit was refused
    unsure = None  # why the last edit the model was unsure of was refused
    for attempt, sampler in _attempts(target, strength):
        generated, used, score = _generate(backend, doc, target, settings, instruction,
                                           attempt, cancel, sampler)
        steps += used
        if generated is None:
            raise RewriteError("cancelled")
        if (reason := gate.refusal(score, settings.min_edit_confidence)) is not None:
            unsure = reason
            continue
        text = shape(target, generated, doc)
        original = doc.text[target.start : target.end]
        if text is not None and accept.stutters(text) and not accept.stutters(original):
            # a small model's loop
            unasked = "repeats itself"
            continue
        if text is not None:
            text = _parseable(doc, target, text, before)
        if text is not None and text == original:
            raise RewriteError("the model's version is the same as the original")
        if text is not None and target.action == COMPLETE_BODY and _only_docstring(text, doc):
            unasked = "is a docstring, no code"  # what "Add docstring" is for
            continue
        if text is not None:
            unasked = _unasked_change(doc, target, text, instruction)
            if unasked is None:
                return Edit(target.start, target.end, text, steps)
    if unasked is not None:
        raise RewriteError(f"the model's version {unasked}")
    if unsure is not None:
        raise RewriteError(unsure)
    if target.action == FIX_SYNTAX:
        raise RewriteError(f"the model found no fix for the syntax error ({before} errors)")
    raise RewriteError(f"the model wrote nothing usable for '{target.title}'")


def model_input(doc: ParsedText, target: Target, settings: Settings, instruction: str | None
                ) -> tuple[str, str]:
    """(prefix, suffix) the model reads around the hole."""
    text = doc.text
    prefix = text[: target.start] + target.before
    if instruction and instruction.strip():
        line = doc.line_start(target.start)
        comment = doc.language.line_comment if doc.language else "#"
        note = " ".join(instruction.split())
        prefix = (text[:line] + doc.indent_at(target.start) + f"{comment} {note}\n"
                  + text[line : target.start] + target.before)
    suffix = target.after + text[target.end :]
    budget = char_budget(settings.canvas_length, target.max_tokens)
    return windows(prefix, suffix, budget, settings.suffix_fraction)


def shape(target: Target, generated: str, doc: ParsedText) -> str | None:
    """The replacement text for target's span from the model's hole text; None if empty."""
    lang = doc.language.name if doc.language else ""
    if target.action == DOCSTRING:
        closer = {"python": '"""', "rust": "\n", "go": "\n"}.get(lang, "*/")
        body = generated.split(closer, 1)[0]
        lines = [ln.strip().lstrip("*").strip() for ln in body.strip().split("\n")]
        lines = [ln.rstrip("\\") for ln in lines]
        while lines and not lines[-1]:
            lines.pop()
        if not lines or not lines[0]:
            return None
        inner = target.indent
        if lang == "python":
            if len(lines) == 1:
                return f'\n{inner}"""{lines[0]}"""'
            rest = "".join(f"\n{inner}{ln}" if ln else "\n" for ln in lines[1:])
            return f'\n{inner}"""{lines[0]}{rest}\n{inner}"""'
        if lang in ("rust", "go"):
            return target.before + lines[0] + "\n"
        if len(lines) == 1:
            return f"{inner}/** {lines[0]} */\n"
        return f"{inner}/**\n" + "".join(f"{inner} * {ln}\n" for ln in lines) + f"{inner} */\n"
    text = generated.strip()
    if not text:
        return None
    if target.action == COMPLETE_BODY:
        return target.before + _in_body(text, target.indent) + target.after
    return text


def _in_body(text: str, indent: str) -> str:
    """`text` (its first line at the body's indentation) up to the first line dedented out of
    the body: a small model goes on past the body's end with new definitions nobody asked
    for."""
    lines = text.split("\n")
    kept = lines[:1]
    for line in lines[1:]:
        if line.strip() and indent_width(leading_indent(line)) < indent_width(indent):
            break
        kept.append(line)
    return "\n".join(kept).rstrip()


def _only_docstring(body: str, doc: ParsedText) -> bool:
    """Whether a generated Python body holds nothing but string literals: a small model,
    shown a function with no docstring, starts one and fills the body with it."""
    if doc.language is None or doc.language.name != "python":
        return False
    alone = ParsedText(textwrap.dedent(body.strip("\n")), doc.language).tree
    return all(is_docstring(statement) for statement in alone.root_node.named_children)


def _attempts(target: Target, strength: float) -> list[tuple[float, dict]]:
    """(strength, sampler settings changed) of each try, the next only where one is refused."""
    if target.action == COMPLETE_BODY:
        return [(1.0, {}), (1.0, BODY_RETRY)]  # nothing worth keeping: generated afresh
    if target.action == DOCSTRING:
        return [(1.0, {})]
    if target.action == FIX_SYNTAX and strength < 1.0:
        return [(strength, {}), (1.0, {})]  # kept tokens may keep the error: then try afresh
    return [(strength, {})]


def _generate(
    backend: Backend,
    doc: ParsedText,
    target: Target,
    settings: Settings,
    instruction: str | None,
    strength: float,
    cancel: Callable[[], bool] | None,
    changed: dict | None = None,
) -> tuple[str | None, int, Score | None]:
    """The hole's text (None when cancelled), the forward passes it took and the engine's
    Score of it; `changed`: sampler settings this try sets otherwise."""
    prefix, suffix = model_input(doc, target, settings, instruction)
    # An action's edit must not depend on which requests the engine served before.
    sampler = replace(settings.sampler, **{"min_tokens": MIN_TOKENS.get(target.action, 0),
                                           "share_prefix": False, **(changed or {})})
    original = doc.text[target.start : target.end]
    if original and strength < 1.0:
        # Remasking has no held-out measurement that favours cached passes (infill holes
        # do): it keeps the exact context keys/values.
        drafts = backend.rewrite_stream(RewriteRequest(
            prefix, suffix, original, strength, target.max_tokens,
            replace(sampler, cache_refresh=1), settings.canvas_length,
            settings.suffix_fraction), cancel, document=doc.uri or None)
    else:
        drafts = backend.infill_stream(InfillRequest(
            prefix, suffix, target.max_tokens, sampler, settings.canvas_length,
            settings.suffix_fraction), cancel, document=doc.uri or None)
    try:
        last = last_draft(drafts)
    except ValueError as exc:  # the engine's canvas cannot hold the selection
        raise RewriteError(f"the selection is too long for the model: {exc}") from exc
    if last is None or last.finish_reason == "cancelled":
        return None, 0 if last is None else last.step, None
    return last.text, last.step, last.score


def _parseable(doc: ParsedText, target: Target, text: str, errors_before: int) -> str | None:
    """`text` (for a body: or its longest whole-line prefix) if the edited document has no
    more syntax errors than before (fewer, for a syntax fix); else None."""
    if doc.language is None:
        return text
    allowed = errors_before - 1 if target.action == FIX_SYNTAX else errors_before
    original = doc.text[target.start : target.end]
    lines = text.split("\n")
    # Only a generated body may lose trailing lines; a rewrite is whole or refused, never
    # shorter than the model wrote (that would silently delete the user's code).
    shortest = 1 if target.action == COMPLETE_BODY else len(lines)
    for n in range(len(lines), shortest - 1, -1):
        candidate = "\n".join(lines[:n])
        if target.action == COMPLETE_BODY and n < len(lines):
            candidate = candidate.rstrip() + target.after
        if not candidate.strip() or candidate == target.before + target.after:
            break
        if target.action != FIX_SYNTAX and not _same_nesting(candidate, original):
            continue  # an edit that closes brackets it did not open changes code outside it
        if accept.parses_no_worse(doc.replaced(target.start, target.end, candidate), allowed):
            return candidate
    return None


def _unasked_change(doc: ParsedText, target: Target, text: str, instruction: str | None
                    ) -> str | None:
    """What replacing the target's span by `text` changes that was not asked for, or None."""
    if doc.language is None:
        return None
    edited = doc.replaced(target.start, target.end, text)
    # The file's words and the instruction's: "use jnp" asks for a name the file lacks.
    known = doc.text + "\n" + (instruction or "")
    unknown = accept.unknown_names(doc, edited, target.start, text, known)
    if unknown:
        return names.refusal(unknown)
    start, old_end = doc.byte(target.start), doc.byte(target.end)
    new_end = start + len(text.encode("utf-8"))
    return signature.refusal(doc.language, (doc.tree, start, old_end),
                             (edited.tree, start, new_end), instruction)


def _nesting(code: str) -> tuple[int, int]:
    """(lowest, final) bracket depth across `code`, skipping quoted strings."""
    depths = [depth for _, _, depth in bracket_depths(code)]
    return min([0, *depths]), (depths[-1] if depths else 0)


def _same_nesting(new: str, old: str) -> bool:
    """Whether `new` closes no bracket `old` did not close and leaves as many open."""
    new_low, new_final = _nesting(new)
    old_low, old_final = _nesting(old)
    return new_low >= old_low and new_final == old_final
