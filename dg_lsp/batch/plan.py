"""Preparing `dg-lsp batch`: the command line checked, the files found and read, and each
file's targets (dg_lsp.batch.job.file_targets): the work the run is about to do."""

from __future__ import annotations

import argparse

from dg_lsp.actions.targets import FILL_FUNCTION, FIX_SYNTAX, REWRITE, Target
from dg_lsp.batch.discover import discover
from dg_lsp.batch.job import ACTION_NAMES, BatchJob, Queries, QueryError, file_targets
from dg_lsp.document.parsed import ParsedText
from dg_lsp.engines import check_engine_arguments
from dg_lsp.files import Source, SourceError, read_source
from dg_lsp.settings import ENGINE_MODES, settings_from_arguments
from dg_lsp.syntax.languages import LANGUAGES, LanguageSpec, language_for


class BadInput(Exception):
    """A command line the run cannot start with, or no engine (exit 2, nothing written)."""


Plan = tuple[Source, ParsedText, list[Target]]  # the file as read, its document, its targets


def prepare(args: argparse.Namespace
            ) -> tuple[BatchJob, dict[str, Plan], list[tuple[str, str]], list[str]]:
    """The job, the files with work in them (by label), the files skipped, with why, and the
    files read that have nothing to do."""
    action = ACTION_NAMES[args.action]
    if action == REWRITE and args.query is None:
        raise BadInput("--action rewrite needs --query FILE.scm (its @target captures are the "
                       "code to rewrite)")
    if action == FIX_SYNTAX and args.query is not None:
        raise BadInput("--query does not apply to fix-syntax (its targets are syntax errors)")
    if action == FILL_FUNCTION and args.query is not None:
        raise BadInput("--query does not apply to fill-holes (its targets are stub holes)")
    try:
        check_engine_arguments(args.engine, args.token_file, args.paths)
    except ValueError as exc:
        raise BadInput(str(exc)) from None
    if args.ray is not None and args.engine not in ENGINE_MODES:
        raise BadInput("--ray runs the model on the cluster's workers; a team's engine "
                       "(--engine URL) already spreads the work over its replicas: use one")
    if args.ray is not None:
        from dg_lsp.batch.on_ray import RayMissing, import_ray

        try:
            import_ray()
        except RayMissing as exc:
            raise BadInput(str(exc)) from None
    source = None
    if args.query is not None:
        try:
            source = read_source(args.query).text
        except SourceError as exc:
            raise BadInput(f"cannot read the query: {exc}") from None
    try:
        files = discover(args.paths, args.include, args.exclude)
    except FileNotFoundError as exc:
        raise BadInput(str(exc)) from None

    settings = settings_from_arguments(args, engine=args.engine,
                                       engine_token_file=args.token_file)
    job = BatchJob(action, settings, source, args.instruction, args.strength)
    queries = Queries(source, action)
    languages = {f.label: language_for(None, f.label) for f in files}
    _check_query(queries, [spec for spec in languages.values() if spec is not None])

    plans: dict[str, Plan] = {}
    skipped: list[tuple[str, str]] = []
    idle: list[str] = []
    for file in files:
        language = languages[file.label]
        if language is None:
            skipped.append((file.label, "unknown language"))
            continue
        try:
            source = read_source(file.path)
            query = queries.for_language(language)
        except SourceError as exc:
            skipped.append((file.label, str(exc).removeprefix(f"{file.path}: ")))
            continue
        except QueryError as exc:
            skipped.append((file.label, f"the query does not fit {exc}"))
            continue
        doc = ParsedText(source.text, language, uri=file.path.resolve().as_uri())
        targets = file_targets(doc, action, query)
        if targets:
            plans[file.label] = (source, doc, targets)
        else:
            idle.append(file.label)
    return job, plans, skipped, idle


def _check_query(queries: Queries, present: list[LanguageSpec]) -> None:
    """BadInput unless the query compiles for at least one language the run meets."""
    if queries.source is None:
        return
    errors = []
    for spec in dict.fromkeys(present) or LANGUAGES:
        try:
            queries.for_language(spec)
            return
        except QueryError as exc:
            errors.append(str(exc))
    raise BadInput("malformed query: " + "; ".join(dict.fromkeys(errors)))
