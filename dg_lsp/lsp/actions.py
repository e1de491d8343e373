"""`textDocument/codeAction`, `codeAction/resolve` and the "rewrite with instruction" command:
which actions apply at a range (without running the model), their edits (resolved lazily or,
for clients that cannot resolve, at once).

The model runs in dg_lsp.actions.rewrite (`compute_edit`; the fill actions: dg_lsp.actions.holes)
on a thread of its own, each denoising
step on the engine's worker, so completions in other documents step between a rewrite's steps.
A refused edit is an LSP error the user is shown (RequestFailed, or ContentModified when the
document changed while the model ran).
"""

from __future__ import annotations

import asyncio
import functools
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

import tree_sitter as ts
from lsprotocol import types
from pygls.exceptions import JsonRpcContentModified, JsonRpcException

from dg_lsp.actions.holes import action_edit, hole_targets
from dg_lsp.actions.targets import FIX_SYNTAX, REWRITE, Target, targets_at
from dg_lsp.document import accept
from dg_lsp.document.edit import RewriteError
from dg_lsp.document.parsed import ParsedText
from dg_lsp.lsp.documents import short_path
from dg_lsp.lsp.state import DgLanguageServer
from dg_lsp.positions import offset_at, position_at
from dg_lsp.syntax.languages import LanguageSpec, language_for
from engine.backend import Backend
from engine.serve.socket.client import EngineUnavailable

T = TypeVar("T")

# workspace/executeCommand arguments: [{"textDocument": {"uri", "version"}, "range",
# "instruction"?, "strength"?}]; applies the rewrite with workspace/applyEdit and returns the
# WorkspaceEdit once the client says it applied it, else null (the user is told why). The
# "Rewrite selection with instruction…" code action carries this command without an
# instruction: editors prompt for one (clients that cannot just rewrite).
REWRITE_COMMAND = "dg-lsp.rewriteWithInstruction"
ACTION_KINDS = {FIX_SYNTAX: types.CodeActionKind.QuickFix}  # the others: refactor.rewrite
CODE_ACTION_OPTIONS = types.CodeActionOptions(
    code_action_kinds=[types.CodeActionKind.RefactorRewrite, types.CodeActionKind.QuickFix],
    resolve_provider=True)
REQUEST_FAILED = -32803  # LSP's RequestFailed: the request was valid, the edit is refused
# Seconds REWRITE_COMMAND waits for the client's answer to its workspace/applyEdit. Editors
# apply an edit and answer at once; one that never answers must not hold the command (and
# the progress the editor shows for it) forever.
APPLY_EDIT_TIMEOUT = 10.0


def register(server: DgLanguageServer) -> None:
    @server.feature(types.TEXT_DOCUMENT_CODE_ACTION, CODE_ACTION_OPTIONS)
    async def code_action(ls: DgLanguageServer, params: types.CodeActionParams
                          ) -> list[types.CodeAction]:
        return await code_actions_for_client(ls, params)

    @server.feature(types.CODE_ACTION_RESOLVE)
    async def resolve_code_action(ls: DgLanguageServer, action: types.CodeAction
                                  ) -> types.CodeAction:
        return await resolve_action(ls, action)

    @server.command(REWRITE_COMMAND)
    async def rewrite_with_instruction(ls: DgLanguageServer, *args: Any
                                       ) -> types.WorkspaceEdit | None:
        return await rewrite_command(ls, *args)


async def code_actions(server: DgLanguageServer, params: types.CodeActionParams
                       ) -> list[types.CodeAction]:
    """The actions that apply at the range, without running the model (resolve does). They
    are looked for on a thread: editors ask at every cursor move, and a completion in another
    document must not wait behind a large file's scan."""
    snapshot = _snapshot(server, params.text_document.uri, params.range)
    if snapshot is None:
        return []
    _, targets = await asyncio.get_running_loop().run_in_executor(None, scan, snapshot)
    uri = snapshot.uri
    actions = []
    for target in targets:
        # The revision too: the range is read on this text, which a reopened document (or a
        # change that keeps the version) no longer has at the same version.
        data = {"uri": uri, "version": snapshot.version, "revision": snapshot.revision,
                "action": target.action, "range": _range_json(params.range)}
        kind = ACTION_KINDS.get(target.action, types.CodeActionKind.RefactorRewrite)
        actions.append(types.CodeAction(title=target.title, kind=kind, data=data))
        if target.action == REWRITE:
            args = {"textDocument": {"uri": uri, "version": snapshot.version},
                    "range": _range_json(params.range)}
            actions.append(types.CodeAction(
                title="Rewrite selection with instruction…", kind=kind,
                command=types.Command("Rewrite selection with instruction…",
                                      REWRITE_COMMAND, arguments=[args])))
    return actions


async def code_actions_for_client(server: DgLanguageServer, params: types.CodeActionParams
                                  ) -> list[types.CodeAction]:
    """The actions at the range; with their edits for a client that cannot resolve them."""
    actions = await code_actions(server, params)
    if resolves_lazily(server):
        return actions
    eager = []  # a client that cannot resolve gets every edit now
    for action in actions:
        if action.data is None:
            eager.append(action)
            continue
        try:
            eager.append(await resolve_action(server, action))
        except JsonRpcException:
            continue  # refused: the user was told why; the action is not offered
    return eager


def resolves_lazily(server: DgLanguageServer) -> bool:
    """Whether the client resolves a code action's edit (else it gets it eagerly)."""
    caps = server.known_capabilities
    action = caps and caps.text_document and caps.text_document.code_action
    support = action and action.resolve_support
    return bool(support and "edit" in support.properties)


async def resolve_action(server: DgLanguageServer, action: types.CodeAction
                         ) -> types.CodeAction:
    """The action with its WorkspaceEdit; an LSP error (shown to the user) when refused."""
    data = action.data if isinstance(action.data, dict) else {}
    try:
        uri, version = data["uri"], data["version"]
        lsp_range = _range_from_json(data["range"])
        kind = data["action"]
    except (KeyError, TypeError, ValueError) as exc:
        raise JsonRpcException(f"dg-lsp: malformed code action data: {exc}",
                               REQUEST_FAILED) from exc
    action.edit = await rewrite(server, uri, version, lsp_range, kind,
                                revision=data.get("revision"))
    return action


async def rewrite_command(server: DgLanguageServer, *args: Any) -> types.WorkspaceEdit | None:
    """REWRITE_COMMAND: rewrite the range as told and apply the edit in the client."""
    try:
        raw = args[0] if args and isinstance(args[0], dict) else {}
        uri = raw["textDocument"]["uri"]
        version = raw["textDocument"].get("version")
        lsp_range = _range_from_json(raw["range"])
        instruction = raw.get("instruction")
        strength = raw.get("strength")
        if instruction is not None and not isinstance(instruction, str):
            raise ValueError("instruction must be a string")
        if strength is not None and (isinstance(strength, bool)
                                     or not isinstance(strength, int | float)):
            raise ValueError("strength must be a number")
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        server.window_show_message(types.ShowMessageParams(
            types.MessageType.Error, f"dg-lsp: {REWRITE_COMMAND}: bad arguments: {exc}"))
        return None
    try:
        edit = await rewrite(server, uri, version, lsp_range, REWRITE, instruction, strength)
    except JsonRpcException:
        return None  # refused: already shown to the user
    reason = await _apply(server, edit)
    if reason is None:
        return edit
    server.window_show_message(types.ShowMessageParams(
        types.MessageType.Warning, f"dg-lsp: the rewrite was not applied: {reason}"))
    return None


async def _apply(server: DgLanguageServer, edit: types.WorkspaceEdit) -> str | None:
    """Has the client apply `edit`: None once it says it did, else why it did not (also when
    it answers with an error, with no result, or not within APPLY_EDIT_TIMEOUT)."""
    answer = server.workspace_apply_edit_async(types.ApplyWorkspaceEditParams(
        edit, label="dg-lsp: rewrite selection"))
    try:
        # shield: a late answer then resolves a pending future instead of a cancelled one
        result = await asyncio.wait_for(asyncio.shield(answer), APPLY_EDIT_TIMEOUT)
    except asyncio.TimeoutError:  # not the builtin TimeoutError before Python 3.11
        return (f"the editor did not answer workspace/applyEdit in {APPLY_EDIT_TIMEOUT:g} s "
                "(it may still apply it)")
    except JsonRpcException as exc:
        return f"the editor answered workspace/applyEdit with an error: {exc}"
    if not isinstance(result, types.ApplyWorkspaceEditResult):
        return f"the editor answered workspace/applyEdit with {result!r:.60}"
    if not result.applied:
        return "the editor refused it" + (f": {result.failure_reason}"
                                          if result.failure_reason else "")
    return None


async def rewrite(
    server: DgLanguageServer,
    uri: str,
    version: int | None,
    lsp_range: types.Range,
    action: str = REWRITE,
    instruction: str | None = None,
    strength: float | None = None,
    revision: int | None = None,
) -> types.WorkspaceEdit:
    """Run one action on the document as it is at `version` (and at `revision`, given one:
    OpenDocument.revision); its WorkspaceEdit."""
    check_version(server, uri, version, revision)
    revision = server.documents.get(uri).revision
    if (why := accept.unservable(server.documents.get(uri).text)) is not None:
        raise refuse(server, f"no edit is offered in {short_path(uri)}: {why}")
    if not server.documents.get(uri).is_valid_text:
        raise refuse(server, f"{short_path(uri)} holds a lone surrogate (not valid Unicode); "
                     "nothing was changed")
    snapshot = _snapshot(server, uri, lsp_range)
    if snapshot is None:
        raise refuse(server, f"cannot rewrite {short_path(uri)}: range or document invalid")
    doc, targets = await asyncio.get_running_loop().run_in_executor(None, scan, snapshot)
    target = next((t for t in targets if t.action == action), None)
    if target is None:
        raise refuse(server, f"'{action}' does not apply here")
    backend = await server.engine.backend()
    if backend is None:
        raise refuse(server, "the model is not loaded")
    edit = await on_engine(server, backend, functools.partial(
        action_edit, server.engine.stepped(backend), doc, target, server.settings,
        instruction, strength))
    # The user may have typed, or reopened the document, while the model ran: the edit's
    # range is read on the text it was computed on.
    check_version(server, uri, version, revision)
    enc = server.position_encoding
    # The fills of several holes: one TextEdit each, so the code between them is untouched.
    text_edits = [types.TextEdit(types.Range(position_at(doc.text, start, enc),
                                             position_at(doc.text, end, enc)), text)
                  for start, end, text in edit.parts or [(edit.start, edit.end, edit.text)]]
    current = server.documents.get(uri)
    return types.WorkspaceEdit(document_changes=[types.TextDocumentEdit(
        types.OptionalVersionedTextDocumentIdentifier(uri, current.version), text_edits)])


@dataclass(frozen=True)
class Snapshot:
    """A document as a code action reads it: its text and its tree (one the store never
    changes once handed out, dg_lsp.lsp.trees), read on another thread."""

    uri: str
    version: int
    revision: int
    text: str
    language: LanguageSpec | None
    tree: ts.Tree | None
    start: int  # the range, in characters of `text`
    end: int


def _snapshot(server: DgLanguageServer, uri: str, lsp_range: types.Range) -> Snapshot | None:
    """The document and range to look for actions in; None where none can apply.

    On the event loop, as every handler gets its tree: the store is not thread-safe (a change
    arriving mid-parse would leave it a tree of other text), its parse after a keystroke is
    incremental, and tree-sitter holds the GIL while it parses, so a parse on a thread would
    hold up the event loop all the same. What costs in proportion to the file (the search
    for targets and stubs) is `scan`'s, on a thread."""
    doc = server.documents.get(uri)
    # Where every action is refused anyway (accept.unservable), listing them would parse the
    # whole file on the event loop (tree-sitter holds the GIL while it parses).
    if doc is None or not doc.is_valid_text or accept.unservable(doc.text) is not None:
        return None
    enc = server.position_encoding
    # A character past its line's end means the line's end (LSP): a linewise selection
    # ends at Neovim's v:maxcol.
    start = offset_at(doc.text, lsp_range.start, enc, clamp=True)
    end = offset_at(doc.text, lsp_range.end, enc, clamp=True)
    if end < start:
        return None
    language = language_for(doc.language_id, uri)
    tree = server.trees.tree(uri, doc.text, language)
    return Snapshot(uri, doc.version, doc.revision, doc.text, language, tree, start, end)


def scan(snapshot: Snapshot) -> tuple[ParsedText, list[Target]]:
    """The actions' targets at the snapshot's range; on any thread."""
    parsed = ParsedText(snapshot.text, snapshot.language, snapshot.tree, snapshot.uri)
    start, end = snapshot.start, snapshot.end
    return parsed, targets_at(parsed, start, end) + hole_targets(parsed, start, end)


async def on_engine(server: DgLanguageServer, backend: Backend,
                    compute: Callable[[Callable[[], bool]], T]) -> T:
    """`compute(cancelled)` on a thread of its own, its steps on the engine's worker
    (`server.engine.stepped`): completions in other documents take their steps between this
    edit's instead of after all of them. A refusal, or an engine lost meanwhile, is the error
    the user is shown."""
    stop = threading.Event()
    try:
        return await asyncio.get_running_loop().run_in_executor(None, compute, stop.is_set)
    except asyncio.CancelledError:
        stop.set()
        raise
    except RewriteError as exc:
        raise refuse(server, str(exc)) from exc
    except EngineUnavailable as exc:
        server.engine.lost(exc, backend)
        raise refuse(server, "the engine stopped; try again") from exc


def check_version(server: DgLanguageServer, uri: str, version: int | None,
                   revision: int | None = None) -> None:
    """Refuse (ContentModified, shown to the user) unless `uri` is open at `version` and, given
    a `revision`, still has that revision's text (OpenDocument.revision)."""
    doc = server.documents.get(uri)
    if doc is None:
        raise refuse(server, f"{short_path(uri)} is not open")
    if version is not None and doc.version != version:
        message = (f"dg-lsp: {short_path(uri)} changed (version {version} → {doc.version}) "
                   "while the edit was computed; nothing was changed")
    elif revision is not None and doc.revision != revision:
        message = (f"dg-lsp: {short_path(uri)} changed (reopened or edited at version "
                   f"{doc.version}) while the edit was computed; nothing was changed")
    else:
        return
    server.window_show_message(types.ShowMessageParams(types.MessageType.Warning, message))
    raise JsonRpcContentModified(message)


def refuse(server: DgLanguageServer, reason: str) -> JsonRpcException:
    message = f"dg-lsp: {reason}"
    server.window_show_message(types.ShowMessageParams(types.MessageType.Warning, message))
    return JsonRpcException(message, REQUEST_FAILED)


def _range_json(r: types.Range) -> dict[str, Any]:
    return {"start": {"line": r.start.line, "character": r.start.character},
            "end": {"line": r.end.line, "character": r.end.character}}


def _range_from_json(raw: Any) -> types.Range:
    def position(p: Any) -> types.Position:
        line, character = p["line"], p["character"]
        if not isinstance(line, int) or not isinstance(character, int):
            raise ValueError("positions need integer line and character")
        return types.Position(line, character)

    return types.Range(position(raw["start"]), position(raw["end"]))
