"""`dg-lsp complete FILE:LINE:COL`: print the suggestion an editor would show at that cursor.

LINE and COL are 1-based, COL counted in characters. The completion goes through the same
pipeline as the language server's, with the engine in this process (`--engine inproc`, the
default), the resident engine, or a team's engine at a URL (`--engine URL --token-file F`;
the file's URI is sent beside the request so the team's router keeps it on one replica).

Exit status: 0 a suggestion printed, 1 none at this position, 2 bad input or no engine (a
token file that cannot be used, a token the engine refuses, an engine that cannot be reached).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Iterator
from pathlib import Path

from lsprotocol import types

from dg_lsp.completion.judge import judge
from dg_lsp.completion.pipeline import Completion, CompletionRequest, Hidden, Picked, Pipeline
from dg_lsp.context import Context
from dg_lsp.document import gate
from dg_lsp.engines import NoEngine, check_engine_arguments, open_for_command
from dg_lsp.files import SourceError, read_source
from dg_lsp.positions import UTF32, line_end, line_of, line_start, offset_at, position_at
from dg_lsp.repository.candidates import line_tokens
from dg_lsp.repository.retrieve import context_for_file
from dg_lsp.settings import (
    DEFAULT_MIN_CONFIDENCE,
    ENGINE_MODES,
    add_engine_arguments,
    add_model_arguments,
    bounded_argument,
    settings_from_arguments,
)
from dg_lsp.syntax.languages import language_for
from engine.backend import Backend, WrappedBackend
from engine.bounds import MIN_CONFIDENCE_RANGE
from engine.types import Draft, last_draft


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("complete", help="print the completion at FILE:LINE:COL")
    parser.add_argument("location", metavar="FILE:LINE:COL", help="1-based line and column")
    parser.add_argument("--json", action="store_true", help="print text, range and stats")
    parser.add_argument("--explain", action="store_true",
                        help="also print, on standard error, how the suggestion was decided: "
                        "the context the model read, the hole kind, the file's texts offered, "
                        "what the model wrote, its passes, score and confidence, and the "
                        "gate's decision")
    parser.add_argument("--min-confidence", type=bounded_argument(MIN_CONFIDENCE_RANGE),
                        default=DEFAULT_MIN_CONFIDENCE, metavar="P",
                        help="the confidence gate, as the minConfidence setting: hide a "
                        f"suggestion less likely than P to be close to right (default "
                        f"{DEFAULT_MIN_CONFIDENCE}; 0 shows what the model wrote)")
    parser.add_argument("--no-repository-context", action="store_true",
                        help="as the repositoryContext setting false: read only the file, not "
                        "the rest of its repository")
    add_model_arguments(parser)
    add_engine_arguments(parser, ENGINE_MODES, "inproc")
    parser.set_defaults(func=run)


def parse_location(location: str) -> tuple[Path, int, int]:
    """`path:line:col` (1-based) → (path, line, col); the path may itself contain colons."""
    parts = location.rsplit(":", 2)
    if len(parts) != 3 or not parts[1].isdigit() or not parts[2].isdigit():
        raise ValueError(f"expected FILE:LINE:COL, got {location!r}")
    line, col = int(parts[1]), int(parts[2])
    if line < 1 or col < 1:
        raise ValueError(f"LINE and COL start at 1, got {line}:{col}")
    return Path(parts[0]), line, col


def cursor_offset(text: str, line: int, col: int) -> int:
    """Character offset of 1-based (line, col); ValueError when it is outside the text.

    Lines end where an editor's do (LSP's rule: \\n, \\r\\n, \\r)."""
    start = line_start(text, line - 1)
    if start is None:
        lines = line_of(text, len(text))[0] + 1
        raise ValueError(f"line {line} is past the end of the file ({lines} lines)")
    offset = offset_at(text, types.Position(line - 1, col - 1), UTF32)
    if offset is None:
        length = line_end(text, start) - start
        raise ValueError(f"column {col} is past the end of line {line} ({length} characters)")
    return offset


def run(args: argparse.Namespace) -> int:
    from engine.serve.socket.client import EngineUnavailable

    try:
        path, line, col = parse_location(args.location)
        check_engine_arguments(args.engine, args.token_file, [path])
        text = read_source(path).text
        offset = cursor_offset(text, line, col)
    except (ValueError, OSError, SourceError) as exc:
        print(f"dg-lsp complete: {exc}", file=sys.stderr)
        return 2
    settings = settings_from_arguments(args, engine=args.engine,
                                       engine_token_file=args.token_file,
                                       min_confidence=args.min_confidence,
                                       repository_context=not args.no_repository_context)
    repository = context_for_file(path) if settings.repository_context else None
    request = CompletionRequest(text, offset, language_for(None, str(path)),
                                path.resolve().as_uri(), repository=repository)
    try:
        backend = ScoresKept(open_for_command(settings))
        pipeline = Pipeline(backend, settings)
        ctx, drafts = pipeline.start(request)
        last = last_draft(drafts)
    except (NoEngine, EngineUnavailable) as exc:
        print(f"dg-lsp complete: {exc}", file=sys.stderr)
        return 2
    decided = pipeline.decide(request, ctx, last)
    if args.explain:
        print(explanation(ctx, last, decided, settings.min_confidence, backend.scores,
                          backend.top), file=sys.stderr)
    completion = decided if isinstance(decided, Completion) else None
    if args.json:
        print(json.dumps(_as_json(text, completion), ensure_ascii=False))
    elif completion is not None:
        print(completion.text)
    if isinstance(decided, Hidden):
        print(f"dg-lsp complete: no suggestion at this position: {decided.reason}",
              file=sys.stderr)
        return 1
    return 0


class ScoresKept(WrappedBackend):
    """The engine, keeping the scores of the candidates its first pass gives (--explain)."""

    def __init__(self, backend: Backend) -> None:
        super().__init__(backend)
        self.scores: tuple[tuple[float, ...], ...] = ()
        self.top: tuple[float, ...] = ()

    def _wrap(self, drafts: Iterator[Draft]) -> Iterator[Draft]:
        for draft in drafts:
            if draft.choice_logprobs:
                self.scores, self.top = draft.choice_logprobs, draft.top_logprobs
            yield draft


def explanation(ctx: Context, last: Draft | None, decided: Completion | Hidden,
                min_confidence: float, scores: tuple[tuple[float, ...], ...] = (),
                top: tuple[float, ...] = ()) -> str:
    """How a suggestion was decided, part by part, for a person reading a terminal."""
    others = ctx.prefix[: len(ctx.prefix) - len(ctx.prefix_window)]
    lines = [
        f"context: {len(ctx.prefix_window)} characters before the cursor, "
        f"{len(ctx.suffix)} after it, {len(others)} from other files",
        f"hole: {ctx.kind}",
        *_candidates(ctx, scores, top),
    ]
    if isinstance(last, Picked) and last.written is not None:
        if isinstance(decided, Completion) and decided.text != last.text:
            lines.append(f"judge's pick: {last.text!r}, not sure (p={last.probability:.2f}): "
                         "the model's own writing, which the gate shows, goes first")
            last = last.written
        else:
            lines.append("the model's own writing is hidden: the judge's pick is shown")
    if last is None:
        lines.append("the engine wrote nothing")
    elif isinstance(last, Picked):
        lines.append(f"judge picked: {last.text!r} (p={last.probability:.2f}, "
                     f"after {last.step} passes)")
    else:
        lines.append(f"model wrote: {last.text!r} ({last.step} passes, {last.finish_reason})")
        if last.score is not None:
            lines.append(f"score: least confident token {last.score.lowest:.2f}, mean "
                         f"{last.score.mean:.2f} over {last.score.tokens} tokens")
    line_start = gate.is_line_start(ctx.line_prefix, ctx.kind)
    bar = f"{gate.threshold(min_confidence, line_start):.3g}" + (
        f" (a line start's: {gate.LINE_START_SHARE:g} of {min_confidence:g})"
        if line_start and min_confidence > 0 else "")
    if isinstance(last, Picked):
        bar = f"{judge().gate_threshold(line_start, min_confidence):.3g} (the judge's)"
    if isinstance(decided, Hidden):
        lines.append(f"gate: hidden, {decided.reason}"
                     + (f" < {bar}" if decided.confidence is not None else ""))
    elif decided.confidence is None:
        lines.append("gate: shown (no score to gate on)")
    else:
        lines.append(f"gate: shown, confidence {decided.confidence:.2f} >= {bar}")
    return "\n".join(lines)


def _candidates(ctx: Context, scores: tuple[tuple[float, ...], ...], top: tuple[float, ...]
                ) -> list[str]:
    """The candidates, each with where it was found and the judge's probability."""
    if not ctx.candidates:
        return ["candidates: none (nothing the file or the repository holds fits here)"]
    chances = judge().probabilities(ctx.candidates, scores,
                                    gate.is_line_start(ctx.line_prefix, ctx.kind), top,
                                    line_tokens(ctx.line_prefix))
    lines = [f"candidates: {len(ctx.candidates)}, judged "
             + ("on the model's first pass and" if scores else "on")
             + " the evidence (p: the judge's probability that it is exactly right)"]
    for candidate, chance in zip(ctx.candidates, chances, strict=True):
        found = "+".join(candidate.sources) + (
            f" ({candidate.match} matched)" if candidate.match else "")
        lines.append(f"  p={chance:.2f} {candidate.text!r}: {found}, {candidate.where}, "
                     f"{candidate.count} place{'s' if candidate.count > 1 else ''}")
    return lines


def _as_json(text: str, completion: Completion | None) -> dict:
    if completion is None:
        return {"text": None}

    def position(offset: int) -> dict[str, int]:
        at = position_at(text, offset, UTF32)
        return {"line": at.line + 1, "column": at.character + 1}

    return {"text": completion.text,
            "range": {"start": position(completion.start), "end": position(completion.end)},
            "kind": completion.kind, "steps": completion.steps}
