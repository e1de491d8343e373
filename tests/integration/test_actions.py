"""Code actions over LSP with the bundled model, and `dg-lsp rewrite` on the command line (each
in a process of its own).

Edits over LSP must equal what the same code computes in this process, change only the
target's range and leave a file that parses with no new errors.
"""

from __future__ import annotations

import ast
import re
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
import pytest_asyncio
from lsprotocol import types
from pygls.exceptions import JsonRpcException

from dg_lsp.actions.rewrite import compute_edit
from dg_lsp.actions.targets import COMPLETE_BODY, DOCSTRING, FIX_SYNTAX, REWRITE
from dg_lsp.document.edit import RewriteError
from dg_lsp.document.parsed import ParsedText
from dg_lsp.lsp.server import REWRITE_COMMAND
from dg_lsp.positions import offset_at
from dg_lsp.settings import Settings
from dg_lsp.syntax.errors import count_errors
from dg_lsp.syntax.languages import language_for
from tests.support.paths import BUNDLED, ROOT
from tests.support.targets import JS, PY, doc, target_of

UTF16 = types.PositionEncodingKind.Utf16


# -- over LSP with the bundled model ----------------------------------------------------------


def apply_edit(text: str, edit: types.WorkspaceEdit, uri: str, version: int) -> str:
    (change,) = edit.document_changes
    assert change.text_document.uri == uri and change.text_document.version == version
    for text_edit in sorted(change.edits, key=lambda e: (e.range.start.line,
                                                         e.range.start.character),
                            reverse=True):
        start = offset_at(text, text_edit.range.start, UTF16)
        end = offset_at(text, text_edit.range.end, UTF16)
        text = text[:start] + text_edit.new_text + text[end:]
    return text


@pytest.fixture(scope="module")
def engine(bundled_engine):
    return bundled_engine


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def client(engine):
    from tests.support.lsp_client import start

    client, _ = await start(BUNDLED, preset="visual_studio_code")
    client.applied = []

    @client.feature(types.WORKSPACE_APPLY_EDIT)
    def apply(params: types.ApplyWorkspaceEditParams) -> types.ApplyWorkspaceEditResult:
        client.applied.append(params.edit)
        return types.ApplyWorkspaceEditResult(applied=True)

    yield client
    await client.shutdown_session()


def open_doc(client, text: str, language_id: str) -> str:
    uri = f"file:///tmp/{uuid.uuid4().hex}.{'py' if language_id == 'python' else 'js'}"
    client.text_document_did_open(types.DidOpenTextDocumentParams(
        types.TextDocumentItem(uri=uri, language_id=language_id, version=1, text=text)))
    return uri


def lsp_range(text: str, start: int, end: int) -> types.Range:
    def position(offset: int) -> types.Position:
        line_start = text.rfind("\n", 0, offset) + 1
        return types.Position(text.count("\n", 0, offset), offset - line_start)  # ASCII only

    return types.Range(position(start), position(end))


async def code_actions(client, uri: str, r: types.Range) -> list[types.CodeAction]:
    return await client.text_document_code_action_async(types.CodeActionParams(
        types.TextDocumentIdentifier(uri), r, types.CodeActionContext(diagnostics=[])))


CASES = [
    ("python", PY, REWRITE, "self.x = x", len("self.x = x")),
    ("python", PY, COMPLETE_BODY, "...", 0),
    ("python", PY, DOCSTRING, "load_config", 0),
    ("python", PY, FIX_SYNTAX, "x = (", 0),
    ("javascript", JS, REWRITE, "return a + b;", len("return a + b;")),
    ("javascript", JS, DOCSTRING, "square", 0),
    ("javascript", JS, FIX_SYNTAX, "return a +;", 0),
]


@pytest.mark.asyncio(loop_scope="module")
@pytest.mark.parametrize(("language", "text", "action", "needle", "length"), CASES)
async def test_each_action_resolves_to_the_edit_the_pipeline_computes(
    client, engine, language, text, action, needle, length
):
    uri = open_doc(client, text, language)
    start = text.index(needle)
    listed = await code_actions(client, uri, lsp_range(text, start, start + length))
    (offered,) = [a for a in listed if getattr(a, "data", None) and a.data["action"] == action]
    assert offered.edit is None  # listing is cheap: the model runs in resolve
    d = doc(text, language)
    target = target_of(d, start, start + length, action)
    try:
        expected = compute_edit(engine, d, target, Settings())
    except RewriteError as refused:
        # the small bundled model writes no usable JavaScript doc comment, its fix of
        # `x = (1 + 2` uses `random`, which PY never imports, and its body of `norm` closes a
        # bracket it never opened: the client is told why, in the pipeline's words, and gets
        # no edit
        with pytest.raises(JsonRpcException, match=re.escape(str(refused))):
            await client.code_action_resolve_async(offered)
        assert (language, action) in {("javascript", DOCSTRING), ("python", FIX_SYNTAX),
                                      ("python", COMPLETE_BODY)}
        return
    resolved = await client.code_action_resolve_async(offered)
    new = apply_edit(text, resolved.edit, uri, 1)
    assert new == text[:expected.start] + expected.text + text[expected.end:]
    assert new != text
    # only the target's span changed, and the file parses with no new errors
    assert new[:target.start] == text[:target.start]
    assert new[len(new) - (len(text) - target.end):] == text[target.end:]
    allowed = count_errors(d.tree) - (1 if action == FIX_SYNTAX else 0)
    assert count_errors(ParsedText(new, language_for(language)).tree) <= allowed


@pytest.mark.asyncio(loop_scope="module")
async def test_actions_follow_typing_and_reparse_only_what_changed(client):
    from tests.support.lsp_client import stats

    before = await stats(client)
    uri = open_doc(client, PY, "python")
    # the user types a new stub at the top of the file, a keystroke or a paste at a time
    text, cursor = PY, 0
    for version, typed in enumerate(["def sc", "ale(v, k):\n", "    ...\n\n\n"], start=2):
        at = types.Position(text.count("\n", 0, cursor),
                            cursor - text.rfind("\n", 0, cursor) - 1)
        client.text_document_did_change(types.DidChangeTextDocumentParams(
            types.VersionedTextDocumentIdentifier(uri=uri, version=version),
            [types.TextDocumentContentChangePartial(range=types.Range(at, at), text=typed)]))
        text, cursor = text[:cursor] + typed + text[cursor:], cursor + len(typed)
    stub = text.index("...")
    listed = await code_actions(client, uri, lsp_range(text, stub, stub))
    assert [a.title for a in listed] == ["Complete function body of scale",
                                        "Add docstring of scale"]
    after = await stats(client)
    # keystrokes parse nothing: the first listing parses the document once
    assert after["fullParses"] - before["fullParses"] == 1
    assert after["incrementalParses"] - before["incrementalParses"] == 0
    # the next keystrokes edit that tree, and the next listing re-parses only what changed
    for version, (typed, at) in enumerate([("x", 4), ("y", 5)], start=5):
        client.text_document_did_change(types.DidChangeTextDocumentParams(
            types.VersionedTextDocumentIdentifier(uri=uri, version=version),
            [types.TextDocumentContentChangePartial(
                range=types.Range(types.Position(0, at), types.Position(0, at)), text=typed)]))
    text = text.replace("def scale", "def xyscale", 1)
    stub = text.index("...")
    listed = await code_actions(client, uri, lsp_range(text, stub, stub))
    assert [a.title for a in listed] == ["Complete function body of xyscale",
                                        "Add docstring of xyscale"]
    final = await stats(client)
    assert final["fullParses"] == after["fullParses"]
    assert final["incrementalParses"] - after["incrementalParses"] == 1


@pytest.mark.asyncio(loop_scope="module")
async def test_a_selection_ending_past_its_line_means_the_line_end(client):
    # Neovim's linewise selections end at v:maxcol; LSP reads a character past the line's
    # end as the line's end.
    uri = open_doc(client, PY, "python")
    start = PY.index("return json.load(f)")
    exact = await code_actions(client, uri, lsp_range(PY, start, start + 19))
    r = lsp_range(PY, start, start)
    r.end = types.Position(r.start.line, 2**31 - 1)
    assert [a.title for a in await code_actions(client, uri, r)] == [a.title for a in exact]
    assert [a.title for a in exact] == ["Rewrite selection", "Rewrite selection with instruction…"]


@pytest.mark.asyncio(loop_scope="module")
async def test_codeaction_advertises_resolve_and_the_instruction_command(client):
    uri = open_doc(client, JS, "javascript")
    start = JS.index("return a")
    listed = await code_actions(client, uri, lsp_range(JS, start, start + 8))
    titles = [a.title for a in listed]
    assert titles == ["Rewrite selection", "Rewrite selection with instruction…"]
    # lsprotocol reads any result item with a "command" key as a Command, so the test
    # client turns this CodeAction's nested command into its str(); read it back.
    command = ast.literal_eval(listed[1].command)
    assert command["command"] == REWRITE_COMMAND
    assert command["arguments"] == [{"textDocument": {"uri": uri, "version": 1},
                                  "range": {"start": {"line": 1, "character": 2},
                                            "end": {"line": 1, "character": 10}}}]
    # outside any function, no function action; an unknown document gets none at all
    assert list(await code_actions(client, uri, lsp_range(JS, len(JS) - 1, len(JS) - 1))) == []
    assert list(await code_actions(client, "file:///nope.py", lsp_range(JS, 0, 0))) == []


@pytest.mark.asyncio(loop_scope="module")
async def test_a_stale_document_version_is_refused_and_nothing_changes(client):
    uri = open_doc(client, PY, "python")
    start = PY.index("...")
    (offered,) = await code_actions(client, uri, lsp_range(PY, start, start))
    client.text_document_did_change(types.DidChangeTextDocumentParams(
        types.VersionedTextDocumentIdentifier(uri=uri, version=2),
        [types.TextDocumentContentChangeWholeDocument(text=PY + "\n# edited\n")]))
    with pytest.raises(JsonRpcException, match="changed .version 1 → 2."):
        await client.code_action_resolve_async(offered)
    applied = len(client.applied)
    result = await client.workspace_execute_command_async(types.ExecuteCommandParams(
        REWRITE_COMMAND, [{"textDocument": {"uri": uri, "version": 1},
                           "range": _range_json(lsp_range(PY, start, start + 3)),
                           "instruction": "return the length"}]))
    assert result is None and len(client.applied) == applied


def _range_json(r: types.Range) -> dict:
    return {"start": {"line": r.start.line, "character": r.start.character},
            "end": {"line": r.end.line, "character": r.end.character}}


@pytest.mark.asyncio(loop_scope="module")
async def test_rewrite_with_instruction_applies_the_edit_through_the_client(client, engine):
    uri = open_doc(client, PY, "python")
    start = PY.index("return json.load(f)")
    r = lsp_range(PY, start, start + len("return json.load(f)"))
    applied = len(client.applied)
    result = await client.workspace_execute_command_async(types.ExecuteCommandParams(
        REWRITE_COMMAND, [{"textDocument": {"uri": uri, "version": 1}, "range": _range_json(r),
                           "instruction": "use a context manager", "strength": 0.5}]))
    assert len(client.applied) == applied + 1
    edit = client.applied[-1]
    assert edit.document_changes[0].edits[0].range == r
    assert result["documentChanges"][0]["edits"][0]["newText"] == \
        edit.document_changes[0].edits[0].new_text
    d = doc(PY)
    target = target_of(d, start, start + len("return json.load(f)"))
    expected = compute_edit(engine, d, target, Settings(), "use a context manager", 0.5)
    assert edit.document_changes[0].edits[0].new_text == expected.text
    # bad arguments: a clear message, no edit, the server keeps serving
    assert await client.workspace_execute_command_async(types.ExecuteCommandParams(
        REWRITE_COMMAND, [{"range": "nope"}])) is None
    assert "bad arguments" in client.messages[-1].message


# -- command line -----------------------------------------------------------------------------


def dg_lsp(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "dg_lsp.cli", *args], cwd=cwd,
                          capture_output=True, text=True, timeout=600,
                          env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"})


@pytest.mark.slow  # two CLI runs, each loading the bundled model: ~20 s on 2 cores
def test_cli_rewrite_diff_applies_with_git_and_apply_changes_only_the_range(tmp_path, engine):
    source = tmp_path / "config.py"
    source.write_text(PY)
    source.chmod(0o640)
    line = PY.split("\n").index("        self.x = x") + 1
    where = f"{line}:9-{line}:19"
    diff = dg_lsp("rewrite", "config.py", "--range", where, "--diff", "--device", "cpu",
                  cwd=tmp_path)
    assert diff.returncode == 0, diff.stderr
    assert diff.stdout.startswith("--- a/config.py\n+++ b/config.py\n")
    subprocess.run(["git", "init", "-q"], cwd=tmp_path, check=True)
    check = subprocess.run(["git", "apply", "--check", "-"], input=diff.stdout, text=True,
                           cwd=tmp_path, capture_output=True)
    assert check.returncode == 0, check.stderr

    applied = dg_lsp("rewrite", "config.py", "--range", where, "--apply", "--device", "cpu",
                     cwd=tmp_path)
    assert applied.returncode == 0, applied.stderr
    new = source.read_text()
    start = PY.index("self.x = x")
    end = start + len("self.x = x")
    expected = compute_edit(engine, doc(PY), target_of(doc(PY), start, end), Settings())
    assert new == PY[:start] + expected.text + PY[end:]
    assert source.stat().st_mode & 0o777 == 0o640
    subprocess.run(["git", "apply", "-"], input=diff.stdout, text=True, cwd=tmp_path)


@pytest.mark.parametrize(("name", "content", "where", "message"), [
    ("missing.py", None, "1:1-1:2", "missing.py: no such file"),
    ("short.py", "x = 1\n", "5:1-5:2", "line 5 is past the end of the file"),
    ("short.py", "x = 1\n", "1:3-1:1", "the range ends before it starts"),
    ("short.py", "x = 1\n", "1:a-1:2", "expected L:C-L:C"),
    ("blob.py", b"\x00\x01binary", "1:1-1:2", "blob.py: binary file"),
    ("short.py", "x = 1\n", "1:1-1:1", "cannot rewrite: the range is empty"),
])
def test_cli_bad_input_exits_2_with_a_message_and_leaves_the_file(tmp_path, name, content,
                                                                   where, message):
    path = tmp_path / name
    if isinstance(content, bytes):
        path.write_bytes(content)
    elif content is not None:
        path.write_text(content)
    before = path.read_bytes() if path.exists() else None
    result = dg_lsp("rewrite", name, "--range", where, "--apply", cwd=tmp_path)
    assert result.returncode == 2
    assert message in result.stderr
    assert (path.read_bytes() if path.exists() else None) == before


@pytest.mark.asyncio(loop_scope="module")
async def test_a_client_without_resolve_support_gets_the_edit_with_the_action(engine):
    from tests.support.lsp_client import start

    client, _ = await start(BUNDLED, preset="emacs")  # declares no codeAction resolveSupport
    try:
        uri = open_doc(client, PY, "python")
        start_at = PY.index("load_config")
        listed = await code_actions(client, uri, lsp_range(PY, start_at, start_at))
        (action,) = [a for a in listed if a.title.startswith("Add docstring")]
        d = doc(PY)
        expected = compute_edit(engine, d, target_of(d, start_at, start_at, DOCSTRING),
                                Settings())
        new = apply_edit(PY, action.edit, uri, 1)
        assert new == PY[:expected.start] + expected.text + PY[expected.end:]
    finally:
        await client.shutdown_session()


