"""`textDocument/inlineCompletion` and `textDocument/completion`: the document's
`CompletionRequest`, the pipeline run on the server's engine (dg_lsp.completion.pipeline), and
the range the completion replaces, as inline items or a completion list.

Each request lives as dg_lsp.lsp.lifecycle says (a newer one cancels it, failures are empty
answers); a document changed or reopened while the completion was computed gets none.

An inline request the user made by hand (triggerKind Invoked: an editor's explicit key or
command) gets what the model wrote even where the confidence gate would hide it; those made
while typing stay gated. After each inline answer the client is told what was decided
(`dg-lsp/suggestion`: shown or not, asked or not, the confidence, why nothing is shown), so
the editor can say "unsure (0.12)" instead of staying silent. List completions stay gated
whatever their trigger: clients send Invoked for every word typed.
"""

from __future__ import annotations

from lsprotocol import types

from dg_lsp.completion.pipeline import (
    Completion,
    CompletionRequest,
    Hidden,
    Pipeline,
    cached_completion,
)
from dg_lsp.context import OtherDocument
from dg_lsp.lsp.documents import short_path
from dg_lsp.lsp.lifecycle import Run, run_request
from dg_lsp.lsp.repository import recent_edits
from dg_lsp.lsp.state import DgLanguageServer
from dg_lsp.positions import line_end, offset_at, units
from dg_lsp.syntax.languages import language_for

MAX_OTHER_DOCUMENTS = 20
SUGGESTION_NOTIFICATION = "dg-lsp/suggestion"
# Typing these asks for a completion even in clients that only complete identifiers.
TRIGGER_CHARACTERS = [".", "(", "[", "{", ",", " ", ":", "=", ">"]


def register(server: DgLanguageServer) -> None:
    @server.feature(types.TEXT_DOCUMENT_INLINE_COMPLETION, types.InlineCompletionOptions())
    async def inline_completion(
        ls: DgLanguageServer, params: types.InlineCompletionParams
    ) -> types.InlineCompletionList:
        asked = (params.context is not None and params.context.trigger_kind
                 == types.InlineCompletionTriggerKind.Invoked)
        return inline_list(await complete(ls, params.text_document.uri, params.position, asked))

    @server.feature(types.TEXT_DOCUMENT_COMPLETION, types.CompletionOptions(
        trigger_characters=TRIGGER_CHARACTERS, resolve_provider=False))
    async def completion(
        ls: DgLanguageServer, params: types.CompletionParams
    ) -> types.CompletionList:
        return completion_list(await complete(ls, params.text_document.uri, params.position))


async def complete(
    server: DgLanguageServer, uri: str, position: types.Position, asked: bool | None = None
) -> tuple[Completion, types.Range] | None:
    """The pipeline's completion at an LSP position and the range it replaces; None when
    there is nothing to show (also when the engine failed: ghost text has no error UI).

    `asked`: an inline request, made by hand (True) or while typing (False); the client is
    told the decision (`dg-lsp/suggestion`). None: a list completion, gated, not told."""
    request = completion_request(server, uri, position)
    if request is None:
        return None
    # The completion and its range are read on this text: a document changed or reopened
    # meanwhile (even at the same version) gets none.
    doc = server.documents.get(uri)
    revision = doc.revision

    async def work(run: Run) -> tuple[Completion, types.Range] | None:
        completion = cached_completion(doc.completions, request)
        if completion is not None:
            server.stats["cacheHits"] += 1
        else:
            backend = await run.engine()
            if backend is None:
                return None
            pipeline = Pipeline(backend, server.settings, doc.completions)
            completion = await pipeline.complete_async(request, asked=bool(asked))
        if server.documents.at(uri, revision) is None:
            return None  # stale: the user has moved on, nothing to tell
        if asked is not None and not (isinstance(completion, Hidden)
                                      and completion.reason == "cancelled"):
            tell_decision(server, uri, position, asked, completion)
        if isinstance(completion, Hidden):
            return None
        return completion, replaced_range(request, position, completion,
                                          server.position_encoding)

    return await run_request(server, "completion", uri, None, work)


def tell_decision(server: DgLanguageServer, uri: str, position: types.Position, asked: bool,
                  decided: Completion | Hidden) -> None:
    """`dg-lsp/suggestion`: what the client was answered at `position`, and why."""
    shown = isinstance(decided, Completion)
    server.protocol.notify(SUGGESTION_NOTIFICATION, {
        "uri": uri, "position": {"line": position.line, "character": position.character},
        "asked": asked, "shown": shown, "belowGate": shown and decided.below_gate,
        "confidence": decided.confidence, "reason": "" if shown else decided.reason})


def completion_request(server: DgLanguageServer, uri: str, position: types.Position
                       ) -> CompletionRequest | None:
    """What the pipeline needs for a completion at `position`; None where none is offered."""
    doc = server.documents.get(uri)
    if doc is None:
        server.log(f"completion for a document that is not open: {uri}")
        return None
    if not server.settings.enabled(doc.language_id or ""):
        return None
    if not doc.is_valid_text:
        server.log(f"{short_path(uri)} holds a lone surrogate (not valid Unicode): "
                   "no completions until it is removed")
        return None
    offset = offset_at(doc.text, position, server.position_encoding)
    if offset is None:
        server.log(f"position {position.line}:{position.character} is outside {uri}")
        return None
    text = doc.text
    if "\x00" in text[max(0, offset - 4096):offset + 4096]:
        return None  # a binary file: nothing a code model should continue
    language = language_for(doc.language_id, uri)
    others = [OtherDocument(short_path(other.uri), other.text)
              for other in list(server.documents)[:MAX_OTHER_DOCUMENTS]
              if other.uri != uri and other.is_valid_text
              and language_for(other.language_id, other.uri) == language]
    return CompletionRequest(text, offset, language, uri, others,
                             server.repositories.context_for(uri),
                             recent_edits(server.documents, uri, language))


def replaced_range(request: CompletionRequest, position: types.Position,
                   completion: Completion, encoding: str) -> types.Range:
    """From the cursor over what the completion re-types on the cursor's line."""
    text = request.text
    stop = min(completion.end, line_end(text, completion.start))
    end = position.character + units(text[completion.start:stop], encoding)
    return types.Range(position, types.Position(position.line, end))


def inline_list(found: tuple[Completion, types.Range] | None) -> types.InlineCompletionList:
    """textDocument/inlineCompletion's answer: one ghost-text item, or none."""
    if found is None:
        return types.InlineCompletionList(items=[])
    completion, replaced = found
    item = types.InlineCompletionItem(insert_text=completion.text, range=replaced)
    return types.InlineCompletionList(items=[item])


def completion_list(found: tuple[Completion, types.Range] | None) -> types.CompletionList:
    """textDocument/completion's answer: one item with a TextEdit (Helix, older clients)."""
    # Incomplete: every keystroke asks again (a cache hit while typing through the text).
    if found is None:
        return types.CompletionList(is_incomplete=True, items=[])
    result, replaced = found
    edit = types.TextEdit(replaced, result.text)
    label = result.text.strip().split("\n", 1)[0]
    item = types.CompletionItem(
        label=label, kind=types.CompletionItemKind.Text, text_edit=edit,
        insert_text_format=types.InsertTextFormat.PlainText,
        detail="dg-lsp", filter_text=result.text, sort_text="0")
    return types.CompletionList(is_incomplete=True, items=[item])
