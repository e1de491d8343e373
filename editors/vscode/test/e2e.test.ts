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
  DidOpenTextDocumentNotification,
  ExecuteCommandRequest,
  ExitNotification,
  InitializeRequest,
  InitializedNotification,
  InlineCompletionRequest,
  InlineCompletionTriggerKind,
  ProtocolConnection,
  ShutdownRequest,
  StreamMessageReader,
  StreamMessageWriter,
  TextEdit,
  WorkspaceEdit,
  createProtocolConnection,
} from 'vscode-languageserver-protocol/node';

import { readConfig, serverSettings } from '../src/config';
import { REWRITE_COMMAND, rewriteArgs } from '../src/rewrite';
import { ENGINE_STATE_NOTIFICATION, EngineStateParams } from '../src/status';

const REPO = path.resolve(__dirname, '..', '..', '..', '..');
const MODEL = process.env.DG_LSP_MODEL ?? path.join(REPO, 'engine', 'bundled', 'default');
const SOURCE = fs.readFileSync(path.join(REPO, 'dg_lsp', 'examples', 'fib.py'), 'utf8');
// Line 8, column 11 (1-based): after "    return" in fibonacci's last line.
const CURSOR = { line: 7, character: 10 };
const STEP_TIMEOUT_MS = 300_000;

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
    const user: Record<string, string> = { model: MODEL, device: 'cpu', engine: 'inproc' };
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
});
