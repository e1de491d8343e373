"""Code actions' targets in a parsed text, without a model."""

from __future__ import annotations

from dg_lsp.actions.targets import (
    REWRITE,
    ParsedText,
    targets_at,
)
from dg_lsp.syntax.languages import language_for


def doc(text: str, language: str = "python") -> ParsedText:
    return ParsedText(text, language_for(language))


def target_of(d: ParsedText, start: int, end: int, action: str = REWRITE):
    (target,) = [t for t in targets_at(d, start, end) if t.action == action]
    return target
