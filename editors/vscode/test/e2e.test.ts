/**
 * End to end: one real `dg-lsp serve --engine inproc --device cpu` with the bundled model,
 * driven through vscode-languageserver-protocol / vscode-jsonrpc (the libraries VS Code's
 * client is built on), with the settings object the extension sends.
 *
 * DG_LSP_COMMAND: how to run dg-lsp, a JSON array (["/venv/bin/python", "-m", "dg_lsp.cli"])
 * or a plain command line; default `dg-lsp` on PATH. DG_LSP_MODEL: the checkpoint; default
 * the repository's engine/bundled/default.
 */

import assert from 'node:assert/strict';
import { ChildProcess, spawn } from 'node:child_process';
import * as fs from 'node:fs';
import * as path from 'node:path';
import { after, before, describe, test } from 'node:test';
import { pathToFileURL } from 'node:url';

import {
  ApplyWorkspaceEditParams,
  ApplyWorkspaceEditRequest,
  DidChangeTextDocumentNotification,
  DidOpenTextDocumentNotification,
  ExecuteCommandRequest,
  ExitNotification,
  InitializeRequest,
  InitializedNotification,
  InlineCompletionRequest,
  InlineCompletionTriggerKind,
  LSPErrorCodes,
  ProtocolConnection,
  ResponseError,
  ServerCapabilities,
  ShutdownRequest,
  StreamMessageReader,
  StreamMessageWriter,
  TextEdit,
  WorkspaceEdit,
  createProtocolConnection,
} from 'vscode-languageserver-protocol/node';

import { readConfig, serverSettings } from '../src/config';
import {
  ACCEPTED_COMMAND,
  CONTENT_MODIFIED,
  DID_SHOW_INLINE_EDIT,
  INLINE_EDIT_REQUEST,
  inlineEditParams,
  parseInlineEdits,
  shownParams,
} from '../src/nextEdit';
import { REWRITE_COMMAND, rewriteArgs } from '../src/rewrite';
import { ENGINE_STATE_NOTIFICATION, EngineStateParams } from '../src/status';

const REPO = path.resolve(__dirname, '..', '..', '..', '..');
const MODEL = process.env.DG_LSP_MODEL ?? path.join(REPO, 'engine', 'bundled', 'default');
const SOURCE = fs.readFileSync(path.join(REPO, 'dg_lsp', 'examples', 'fib.py'), 'utf8');
// Line 8, column 11 (1-based): after "    return" in fibonacci's last line.
const CURSOR = { line: 7, character: 10 };
const STEP_TIMEOUT_MS = 300_000;
// Next edits: the first `count` renamed to `total`, as typed (one change per keystroke).
const PRICES = [
  'def total_price(items):',
  '    count = 0',
  '    for item in items:',
  '        count += item.price',
  '    print(count)',
  '    return count',
  '',
].join('\n');
const RENAMED = PRICES.replace('    count = 0', '    total = 0');
const RENAME_LINE = 1;
const RENAME_COLUMN = 4;

/** DG_LSP_COMMAND as an argv list. */
function dgLspCommand(): string[] {
  const raw = process.env.DG_LSP_COMMAND?.trim();
  if (!raw) {
    return ['dg-lsp'];
  }
  if (raw.startsWith('[')) {
    return JSON.parse(raw) as string[];
  }
  return raw.split(/\s+/);
}

/** The TextEdits a WorkspaceEdit makes to one document, whichever form the server used. */
function editsFor(edit: WorkspaceEdit, uri: string): TextEdit[] {
  const edits: TextEdit[] = [...(edit.changes?.[uri] ?? [])];
  for (const change of edit.documentChanges ?? []) {
    if ('textDocument' in change && change.textDocument.uri === uri) {
      edits.push(...(change.edits as TextEdit[]));
    }
  }
  return edits;
}

describe('dg-lsp over vscode-languageserver-protocol', () => {
  let server: ChildProcess;
  let connection: ProtocolConnection;
  let stderr = '';
  let died: Promise<never>;
  const states: EngineStateParams[] = [];
  const messages: string[] = [];
  const logs: string[] = [];
  const applied: ApplyWorkspaceEditParams[] = [];
  const uri = pathToFileURL(path.join(REPO, 'dg_lsp', 'examples', 'fib.py')).toString();
  // never written to disk: the server has the text the editor sent
  const pricesUri = pathToFileURL(path.join(REPO, 'dg_lsp', 'examples', 'total_price.py')).toString();
  let capabilities: ServerCapabilities;

  function race<T>(request: Promise<T>): Promise<T> {
    return Promise.race([request, died]);
  }

  before(async () => {
    const [command, ...args] = dgLspCommand();
    server = spawn(
      command,
      [...args, 'serve', '--engine', 'inproc', '--model', MODEL, '--device', 'cpu'],
      { stdio: ['pipe', 'pipe', 'pipe'], env: { ...process.env, OMP_NUM_THREADS: '1' } },
    );
    server.stderr!.on('data', (chunk: Buffer) => {
      stderr += chunk.toString();
    });
    // Rejects when the server cannot start or exits early; every request races it.
    died = new Promise<never>((_, reject) => {
      server.once('error', reject);
      server.once('exit', (code, signal) =>
        reject(new Error(`dg-lsp exited (${code ?? signal}); stderr:\n${stderr}`)));
    });
    died.catch(() => undefined);
    connection = createProtocolConnection(
      new StreamMessageReader(server.stdout!),
      new StreamMessageWriter(server.stdin!),
    );
    connection.onNotification(ENGINE_STATE_NOTIFICATION, (params: EngineStateParams) => {
      states.push(params);
    });
    connection.onNotification('window/showMessage', (params: { message: string }) => {
      messages.push(params.message);
    });
    connection.onNotification('window/logMessage', (params: { message: string }) => {
      logs.push(params.message);
    });
    connection.onRequest(ApplyWorkspaceEditRequest.type, (params) => {
      applied.push(params);
      return { applied: true };
    });
    connection.listen();

    // What the extension sends when the user sets these (settings override the flags:
    // the default engine, "resident", would start a shared background engine).
    // minConfidence 0: at its default the confidence gate hides the bundled model's suggestion
    // at CURSOR (` fibonacci(n)`, which would recurse forever); this suite is about the wire.
    const user: Record<string, unknown> = {
      model: MODEL, device: 'cpu', engine: 'inproc', minConfidence: 0,
    };
    const settings = serverSettings(readConfig((key) => user[key], (key) => user[key]));
    const init = await race(connection.sendRequest(InitializeRequest.type, {
      processId: process.pid,
      rootUri: pathToFileURL(REPO).toString(),
      capabilities: {
        general: { positionEncodings: ['utf-16'] },
        workspace: { applyEdit: true, workspaceEdit: { documentChanges: true } },
        textDocument: { inlineCompletion: {}, codeAction: {} },
      },
      initializationOptions: { 'dg-lsp': settings },
    }));
    assert.equal(init.serverInfo?.name, 'dg-lsp');
    assert.ok(init.capabilities.inlineCompletionProvider, 'no inline completion provider');
    capabilities = init.capabilities;
    await connection.sendNotification(InitializedNotification.type, {});
    await connection.sendNotification(DidOpenTextDocumentNotification.type, {
      textDocument: { uri, languageId: 'python', version: 1, text: SOURCE },
    });
  }, { timeout: STEP_TIMEOUT_MS });

  after(async () => {
    try {
      await Promise.race([
        connection.sendRequest(ShutdownRequest.type),
        new Promise((resolve) => setTimeout(resolve, 10_000)),
      ]);
      await connection.sendNotification(ExitNotification.type);
    } catch {
      // the server is gone already
    }
    const exited = new Promise((resolve) => server.once('exit', resolve));
    const timer = setTimeout(() => server.kill('SIGKILL'), 10_000);
    if (server.exitCode === null && server.signalCode === null) {
      await exited;
    }
    clearTimeout(timer);
    connection.dispose();
  });

  test('inline completion returns a non-empty item at the cursor', { timeout: STEP_TIMEOUT_MS }, async () => {
    const result = await race(connection.sendRequest(InlineCompletionRequest.type, {
      textDocument: { uri },
      position: CURSOR,
      context: { triggerKind: InlineCompletionTriggerKind.Automatic },
    }));
    const items = Array.isArray(result) ? result : result?.items ?? [];
    assert.equal(items.length, 1, `no completion; stderr:\n${stderr}\nmessages: ${messages}`);
    const [item] = items;
    assert.equal(typeof item.insertText, 'string');
    assert.notEqual((item.insertText as string).trim(), '');
    assert.deepEqual(item.range?.start, CURSOR);
    // The engine announced itself to the status bar: loading, then ready; in this process.
    assert.deepEqual(states.map((s) => s.state), ['loading', 'ready']);
    assert.deepEqual(states[1], { state: 'ready', message: `${MODEL} on cpu` });
    assert.ok(logs.some((line) => line.endsWith('(inproc engine)')), logs.join('\n'));
  });

  test('rewriteWithInstruction sends workspace/applyEdit for exactly the range', { timeout: STEP_TIMEOUT_MS }, async () => {
    const range = { start: { line: 3, character: 0 }, end: { line: 7, character: 10 } };
    const args = rewriteArgs(uri, 1, range, 'add type hints');
    const result = await race(connection.sendRequest(ExecuteCommandRequest.type, {
      command: REWRITE_COMMAND,
      arguments: [args],
    }));
    assert.equal(applied.length, 1, `no workspace/applyEdit; messages: ${messages}\nstderr:\n${stderr}`);
    const edits = editsFor(applied[0].edit, uri);
    assert.equal(edits.length, 1);
    assert.deepEqual(edits[0].range, range);
    assert.equal(typeof edits[0].newText, 'string');
    assert.deepEqual(result, applied[0].edit);
  });
  test('next edit: after a rename, copilotInlineEdit answers for the version it was asked', { timeout: STEP_TIMEOUT_MS }, async () => {
    assert.deepEqual(capabilities.experimental, { copilotInlineEdit: true, fillHoles: true });
    assert.ok(capabilities.executeCommandProvider?.commands.includes(ACCEPTED_COMMAND));
    await connection.sendNotification(DidOpenTextDocumentNotification.type, {
      textDocument: { uri: pricesUri, languageId: 'python', version: 1, text: PRICES },
    });
    // `count` selected and `t` typed over it, then `otal`: versions 2 to 6
    const at = (character: number) => ({ line: RENAME_LINE, character });
    const changes = [{ range: { start: at(RENAME_COLUMN), end: at(RENAME_COLUMN + 5) }, text: 't' }];
    for (const [i, ch] of [...'otal'].entries()) {
      const column = RENAME_COLUMN + 1 + i;
      changes.push({ range: { start: at(column), end: at(column) }, text: ch });
    }
    let version = 1;
    for (const change of changes) {
      version += 1;
      await connection.sendNotification(DidChangeTextDocumentNotification.type, {
        textDocument: { uri: pricesUri, version },
        contentChanges: [change],
      });
    }
    assert.equal(version, 6);
    const cursor = at(RENAME_COLUMN + 5); // after `total`
    const result = await race(connection.sendRequest(
      INLINE_EDIT_REQUEST, inlineEditParams(pricesUri, version, cursor))) as { edits: unknown };
    assert.deepEqual(Object.keys(result), ['edits'], JSON.stringify(result));
    assert.ok(Array.isArray(result.edits), JSON.stringify(result));
    const edits = result.edits as Array<Record<string, unknown>>;
    assert.ok(edits.length <= 1, JSON.stringify(result));
    if (edits.length === 0) {
      return; // the model kept the other `count`s: nothing to suggest is a valid answer
    }
    const [edit] = edits;
    assert.deepEqual(Object.keys(edit).sort(), ['command', 'range', 'text', 'textDocument']);
    assert.deepEqual(edit.textDocument, { uri: pricesUri, version });
    assert.equal(typeof edit.text, 'string');
    const command = edit.command as { title: string; command: string; arguments: unknown[] };
    assert.equal(command.command, ACCEPTED_COMMAND);
    assert.equal(typeof command.title, 'string');
    assert.ok(Array.isArray(command.arguments));
    // the range is one of the other `count`s of the renamed text, and the text is new
    const suggestion = parseInlineEdits(result, pricesUri, version);
    assert.ok(suggestion !== undefined, JSON.stringify(result));
    assert.deepEqual(suggestion.range, edit.range);
    const { start, end } = suggestion.range;
    const lines = RENAMED.split('\n');
    assert.equal(start.line, end.line, JSON.stringify(edit.range));
    assert.notEqual(start.line, RENAME_LINE);
    assert.equal(lines[start.line].slice(start.character, end.character), 'count', JSON.stringify(edit.range));
    assert.notEqual(suggestion.text, 'count');
    // what the extension does next: it says it showed it, and runs the command once applied
    await connection.sendNotification(DID_SHOW_INLINE_EDIT, shownParams(suggestion));
    const accepted = await race(connection.sendRequest(ExecuteCommandRequest.type, {
      command: command.command,
      arguments: command.arguments,
    }));
    assert.equal(accepted ?? null, null);
  });

  test('next edit: a request for a version the server no longer has is ContentModified', { timeout: STEP_TIMEOUT_MS }, async () => {
    // version 6 is the server's (the previous test's rename); 5 is stale
    const stale = race(connection.sendRequest(
      INLINE_EDIT_REQUEST, inlineEditParams(pricesUri, 5, { line: RENAME_LINE, character: 8 })));
    await assert.rejects(stale, (err: unknown) => {
      assert.ok(err instanceof ResponseError, String(err));
      assert.equal(err.code, CONTENT_MODIFIED);
      assert.equal(err.code, LSPErrorCodes.ContentModified);
      return true;
    });
  });
});
