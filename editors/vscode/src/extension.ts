/**
 * The VS Code extension: starts `dg-lsp serve` through vscode-languageclient (inline
 * completions come from the server's `textDocument/inlineCompletion`), shows the engine's
 * state in the status bar (or why a suggestion was not shown: src/status.ts), maps `dg-lsp.*` settings to the server's settings, and asks for
 * the instruction of "Rewrite selection with instruction…" before the command reaches the
 * server, and shows the server's next-edit suggestions (src/nextEditView.ts); "Complete at
 * every cursor" inserts each cursor's own text from one request (src/cursors.ts).
 */

import * as vscode from 'vscode';
import {
  DidChangeConfigurationNotification,
  ExecuteCommandRequest,
  LanguageClient,
  LanguageClientOptions,
  ServerOptions,
  State,
} from 'vscode-languageclient/node';

import { FILL_HOLES_REQUEST, cursorEdits, fillHolesParams, parseFills } from './cursors';
import { ExtensionConfig, SECTION, needsRestart, readConfig, serverCommand, serverSettings } from './config';
import { NextEditView } from './nextEditView';
import { REWRITE_COMMAND, checkInstruction, missingInstruction, rewriteArgs, withInstruction } from './rewrite';
import {
  ENGINE_STATE_NOTIFICATION,
  SUGGESTION_NOTIFICATION,
  StatusView,
  parseEngineState,
  parseSuggestion,
  statusView,
  suggestionView,
} from './status';

let controller: Controller | undefined;

export async function activate(context: vscode.ExtensionContext): Promise<void> {
  controller = new Controller();
  context.subscriptions.push(
    controller,
    vscode.commands.registerCommand('dg-lsp.showOutput', () => controller?.output.show(true)),
    vscode.commands.registerCommand('dg-lsp.restart', () => controller?.restart()),
    vscode.commands.registerCommand('dg-lsp.rewriteSelection', () => controller?.rewriteSelection()),
    vscode.commands.registerCommand('dg-lsp.completeAtEveryCursor', () => controller?.completeAtEveryCursor()),
    vscode.workspace.onDidChangeConfiguration((event) => {
      if (event.affectsConfiguration(SECTION)) {
        void controller?.configurationChanged();
      }
    }),
  );
  await controller.start();
}

export async function deactivate(): Promise<void> {
  await controller?.stop();
  controller = undefined;
}

function currentConfig(): ExtensionConfig {
  const settings = vscode.workspace.getConfiguration(SECTION);
  // The program, the engine URL and the token file: the user's value only (config.ts).
  return readConfig(
    (key) => settings.get(key),
    (key) => settings.inspect(key)?.globalValue,
  );
}

async function askInstruction(): Promise<string | undefined> {
  return vscode.window.showInputBox({
    title: 'dg-lsp: Rewrite selection',
    prompt: 'Instruction for the selected code',
    placeHolder: 'e.g. add type hints',
    validateInput: checkInstruction,
    ignoreFocusOut: true,
  });
}

class Controller implements vscode.Disposable {
  readonly output = vscode.window.createOutputChannel('dg-lsp', { log: true });
  private readonly status = vscode.window.createStatusBarItem(vscode.StatusBarAlignment.Right, 100);
  private client: LanguageClient | undefined;
  private config: ExtensionConfig = currentConfig();
  private state = 'starting';
  private message = '';
  // What the server said of another file's suggestion does not belong to this one.
  private readonly editorChanged = vscode.window.onDidChangeActiveTextEditor(
    () => this.render(statusView(this.state, this.message)));
  private readonly nextEdit = new NextEditView(() => this.client, () => this.config.nextEdit, this.output);

  constructor() {
    this.show('starting');
    this.status.show();
  }

  async start(): Promise<void> {
    this.config = currentConfig();
    const { command, args } = serverCommand(this.config);
    // stdio without `transport`: TransportKind.stdio would append `--stdio` to the command
    // line, which `dg-lsp serve` refuses (the server never started in VS Code with it).
    const serverOptions: ServerOptions = { command, args };
    const clientOptions: LanguageClientOptions = {
      // Every document: the server uses other open files as context and itself skips
      // languages that are not enabled (the `languages` setting), without a restart.
      documentSelector: [{ scheme: 'file' }, { scheme: 'untitled' }],
      initializationOptions: { [SECTION]: serverSettings(this.config) },
      outputChannel: this.output,
      middleware: {
        executeCommand: async (cmd, cmdArgs, next) => {
          if (missingInstruction(cmd, cmdArgs)) {
            const instruction = await askInstruction();
            if (instruction === undefined) {
              return undefined; // cancelled
            }
            cmdArgs = withInstruction(cmdArgs, instruction);
          }
          return next(cmd, cmdArgs);
        },
        // Ghost text is the main surface; the menu item is opt-in (`dg-lsp.completionMenu`).
        provideCompletionItem: (document, position, ctx, token, next) =>
          this.config.completionMenu ? next(document, position, ctx, token) : undefined,
      },
    };
    const client = new LanguageClient(SECTION, 'dg-lsp', serverOptions, clientOptions);
    client.onNotification(ENGINE_STATE_NOTIFICATION, (params: unknown) => {
      const state = parseEngineState(params);
      if (state !== undefined) {
        this.output.appendLine(`engine ${state.state}: ${state.message}`);
        this.show(state.state, state.message);
      }
    });
    client.onNotification(SUGGESTION_NOTIFICATION, (params: unknown) => {
      const suggestion = parseSuggestion(params);
      const active = vscode.window.activeTextEditor?.document.uri.toString();
      if (suggestion === undefined || active !== client.protocol2CodeConverter.asUri(suggestion.uri).toString()) {
        return;
      }
      this.render(suggestionView(suggestion) ?? statusView(this.state, this.message));
    });
    client.onDidChangeState((event) => {
      if (event.newState === State.Stopped) {
        this.show('stopped');
      }
    });
    this.client = client;
    this.show('starting');
    try {
      await client.start();
      // No spinner while nothing loads: the server loads the model at the first completion.
      if (this.client === client && this.state === 'starting') {
        this.show('running');
      }
    } catch (err) {
      const message = `cannot start "${command}": ${err instanceof Error ? err.message : String(err)}`;
      this.output.appendLine(message);
      this.show('stopped', message);
      void vscode.window.showErrorMessage(
        `dg-lsp: ${message}. Install dg-lsp or set "dg-lsp.path".`);
    }
  }

  async stop(): Promise<void> {
    const client = this.client;
    this.client = undefined;
    if (client !== undefined && client.isRunning()) {
      await client.stop();
    }
  }

  async restart(): Promise<void> {
    await this.stop();
    await this.start();
  }

  async configurationChanged(): Promise<void> {
    const next = currentConfig();
    if (needsRestart(this.config, next) || this.client === undefined || !this.client.isRunning()) {
      await this.restart();
      this.nextEdit.configurationChanged();
      return;
    }
    this.config = next;
    this.nextEdit.configurationChanged();
    await this.client.sendNotification(DidChangeConfigurationNotification.type, {
      settings: { [SECTION]: serverSettings(next) },
    });
  }

  /** The editor command: the active selection, an instruction, then the server command. */
  async rewriteSelection(): Promise<void> {
    const editor = vscode.window.activeTextEditor;
    const client = this.client;
    if (editor === undefined || editor.selection.isEmpty) {
      void vscode.window.showInformationMessage('dg-lsp: select the code to rewrite first.');
      return;
    }
    if (client === undefined || !client.isRunning()) {
      void vscode.window.showErrorMessage('dg-lsp: the language server is not running.');
      return;
    }
    const instruction = await askInstruction();
    if (instruction === undefined) {
      return;
    }
    const { document, selection } = editor;
    const args = rewriteArgs(
      client.code2ProtocolConverter.asUri(document.uri),
      document.version,
      client.code2ProtocolConverter.asRange(selection),
      instruction,
    );
    // The server applies the edit with workspace/applyEdit, which the client carries out.
    await vscode.window.withProgress(
      { location: vscode.ProgressLocation.Notification, title: 'dg-lsp: rewriting…' },
      () => client.sendRequest(ExecuteCommandRequest.type, { command: REWRITE_COMMAND, arguments: [args] }),
    );
  }

  /** The editor command: each cursor's own completion, from one request, in one edit. */
  async completeAtEveryCursor(): Promise<void> {
    const editor = vscode.window.activeTextEditor;
    const client = this.client;
    if (editor === undefined) {
      return;
    }
    if (client === undefined || !client.isRunning()) {
      void vscode.window.showErrorMessage('dg-lsp: the language server is not running.');
      return;
    }
    const { document } = editor;
    const version = document.version;
    const params = fillHolesParams(
      client.code2ProtocolConverter.asUri(document.uri),
      version,
      editor.selections.map((selection) => client.code2ProtocolConverter.asPosition(selection.active)),
    );
    let answer: unknown;
    try {
      answer = await vscode.window.withProgress(
        { location: vscode.ProgressLocation.Window, title: 'dg-lsp: completing at every cursor…' },
        () => client.sendRequest(FILL_HOLES_REQUEST, params),
      );
    } catch {
      return; // refused: the server has shown the user why
    }
    const fills = parseFills(answer);
    if (fills === undefined) {
      this.output.appendLine(`dg-lsp/fillHoles: an answer of an unknown shape: ${JSON.stringify(answer)}`);
      return;
    }
    const edits = cursorEdits(fills);
    if (edits.length === 0) {
      void vscode.window.showInformationMessage('dg-lsp: the model wrote nothing usable at the cursors.');
      return;
    }
    if (document.version !== version) {
      return; // typed meanwhile: the ranges were computed on other text
    }
    await editor.edit((builder) => {
      for (const edit of edits) {
        builder.replace(client.protocol2CodeConverter.asRange(edit.range), edit.text);
      }
    });
  }

  private show(state: string, message = ''): void {
    this.state = state;
    this.message = message;
    this.render(statusView(state, message));
  }

  private render(view: StatusView): void {
    this.status.text = view.text;
    this.status.tooltip = view.tooltip;
    this.status.command = view.command ?? 'dg-lsp.showOutput';
    this.status.backgroundColor = view.warning
      ? new vscode.ThemeColor('statusBarItem.warningBackground')
      : undefined;
  }

  dispose(): void {
    this.nextEdit.dispose();
    this.editorChanged.dispose();
    void this.stop();
    this.status.dispose();
    this.output.dispose();
  }
}
