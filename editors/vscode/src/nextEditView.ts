/**
 * Next-edit suggestions in the editor, with VS Code's stable API only: after changes in the
 * active editor (debounced) the server is asked for `textDocument/copilotInlineEdit` through
 * the LanguageClient; a suggestion is drawn with decorations (the replaced range struck out on
 * the diff editor's removed colour, the new text after it on the inserted colour), the context
 * key `dg-lsp.nextEditVisible` is set, and the commands `dg-lsp.acceptNextEdit` (Tab: jump to
 * it, then apply it) and `dg-lsp.dismissNextEdit` (Escape) act on it. The decisions are in
 * src/nextEdit.ts, unit-tested.
 */

import * as vscode from 'vscode';
import { ExecuteCommandRequest, LanguageClient, State } from 'vscode-languageclient/node';

import {
  DID_SHOW_INLINE_EDIT,
  INLINE_EDIT_REQUEST,
  Suggestion,
  VISIBLE_CONTEXT,
  endOfInsert,
  inlineEditParams,
  isQuietError,
  isStale,
  jumpHint,
  keepsSuggestion,
  parseInlineEdits,
  previewText,
  serverOffersNextEdit,
  shownParams,
  tabAction,
} from './nextEdit';

/** The documents the language client syncs (extension.ts's documentSelector). */
const SYNCED_SCHEMES = ['file', 'untitled'];

interface Shown {
  editor: vscode.TextEditor;
  suggestion: Suggestion;
  range: vscode.Range;
  /** The cursor's line when the suggestion came: it stays while the cursor is between. */
  anchorLine: number;
}

export class NextEditView implements vscode.Disposable {
  private readonly removed = vscode.window.createTextEditorDecorationType({
    backgroundColor: new vscode.ThemeColor('diffEditor.removedTextBackground'),
    textDecoration: 'line-through',
    overviewRulerColor: new vscode.ThemeColor('editorOverviewRuler.deletedForeground'),
    overviewRulerLane: vscode.OverviewRulerLane.Center,
  });
  private readonly inserted = vscode.window.createTextEditorDecorationType({});
  private readonly hint = vscode.window.createTextEditorDecorationType({});
  private readonly disposables: vscode.Disposable[] = [];
  private timer: ReturnType<typeof setTimeout> | undefined;
  private pending: vscode.CancellationTokenSource | undefined;
  private shown: Shown | undefined;

  constructor(
    private readonly client: () => LanguageClient | undefined,
    private readonly config: () => { enabled: boolean; debounceMs: number },
    private readonly output: vscode.LogOutputChannel,
  ) {
    this.disposables.push(
      vscode.workspace.onDidChangeTextDocument((event) => this.changed(event)),
      vscode.window.onDidChangeTextEditorSelection((event) => this.selectionChanged(event)),
      vscode.window.onDidChangeActiveTextEditor(() => this.dismiss()),
      vscode.commands.registerCommand('dg-lsp.acceptNextEdit', () => this.accept()),
      vscode.commands.registerCommand('dg-lsp.dismissNextEdit', () => this.dismiss()),
    );
  }

  /** The settings changed: nothing more is shown or asked for while it is off. */
  configurationChanged(): void {
    if (!this.config().enabled) {
      this.dismiss();
    }
  }

  private changed(event: vscode.TextDocumentChangeEvent): void {
    if (event.contentChanges.length === 0) {
      return; // dirty state only
    }
    if (this.shown !== undefined && this.shown.editor.document === event.document) {
      this.clear();
    }
    const editor = vscode.window.activeTextEditor;
    if (editor === undefined || editor.document !== event.document) {
      return;
    }
    this.cancelPending();
    // Undo and redo imply nothing (the server forgets undone edits, too).
    const undoRedo = event.reason === vscode.TextDocumentChangeReason.Undo ||
      event.reason === vscode.TextDocumentChangeReason.Redo;
    const { enabled, debounceMs } = this.config();
    if (!enabled || undoRedo || !SYNCED_SCHEMES.includes(event.document.uri.scheme)) {
      return;
    }
    this.timer = setTimeout(() => {
      this.timer = undefined;
      void this.request(editor);
    }, debounceMs);
  }

  private cancelPending(): void {
    if (this.timer !== undefined) {
      clearTimeout(this.timer);
      this.timer = undefined;
    }
    this.pending?.cancel();
    this.pending?.dispose();
    this.pending = undefined;
  }

  private async request(editor: vscode.TextEditor): Promise<void> {
    const client = this.client();
    if (client === undefined || client.state !== State.Running ||
        !serverOffersNextEdit(client.initializeResult?.capabilities) ||
        vscode.window.activeTextEditor !== editor) {
      return;
    }
    const { document } = editor;
    const uri = client.code2ProtocolConverter.asUri(document.uri);
    const version = document.version;
    const cursor = editor.selection.active;
    const source = new vscode.CancellationTokenSource();
    const token = source.token;
    this.pending = source;
    let result: unknown;
    try {
      result = await client.sendRequest(
        INLINE_EDIT_REQUEST,
        inlineEditParams(uri, version, client.code2ProtocolConverter.asPosition(cursor)),
        token,
      );
    } catch (err) {
      if (!isQuietError(err) && !token.isCancellationRequested) {
        this.output.warn(`next edit: ${err instanceof Error ? err.message : String(err)}`);
      }
      return;
    } finally {
      if (this.pending === source) {
        this.pending = undefined;
      }
      source.dispose();
    }
    const active = vscode.window.activeTextEditor;
    if (token.isCancellationRequested || active !== editor ||
        isStale({ uri, version }, { uri: client.code2ProtocolConverter.asUri(active.document.uri),
                                    version: active.document.version })) {
      return; // the user moved on: it may not fit any more
    }
    const suggestion = parseInlineEdits(result, uri, version);
    if (suggestion === undefined) {
      return;
    }
    const range = client.protocol2CodeConverter.asRange(suggestion.range);
    if (!document.validateRange(range).isEqual(range) ||
        !keepsSuggestion(suggestion, cursor.line, editor.selection.active.line)) {
      return;
    }
    this.show({ editor, suggestion, range, anchorLine: cursor.line });
    void client.sendNotification(DID_SHOW_INLINE_EDIT, shownParams(suggestion))
      .catch(() => undefined);
  }

  private show(shown: Shown): void {
    this.shown = shown;
    const { editor, suggestion, range } = shown;
    editor.setDecorations(this.removed, range.isEmpty ? [] : [{ range }]);
    editor.setDecorations(this.inserted, [{
      range: new vscode.Range(range.end, range.end),
      hoverMessage: new vscode.MarkdownString('dg-lsp next edit: `Tab` accepts, `Escape` dismisses'),
      renderOptions: {
        after: {
          contentText: previewText(suggestion.text),
          backgroundColor: new vscode.ThemeColor('diffEditor.insertedTextBackground'),
          border: '1px solid',
          borderColor: new vscode.ThemeColor('diffEditor.insertedLineBackground'),
          margin: '0 0 0 0.1em',
        },
      },
    }]);
    this.drawHint();
    void vscode.commands.executeCommand('setContext', VISIBLE_CONTEXT, true);
  }

  /** "Tab ↓ next edit on line N" at the cursor's line while the suggestion is elsewhere. */
  private drawHint(): void {
    if (this.shown === undefined) {
      return;
    }
    const { editor, suggestion } = this.shown;
    const cursor = editor.selection.active;
    const text = jumpHint(suggestion, cursor);
    const end = editor.document.lineAt(cursor.line).range.end;
    editor.setDecorations(this.hint, text === undefined ? [] : [{
      range: new vscode.Range(end, end),
      renderOptions: {
        after: {
          contentText: `  ${text}`,
          color: new vscode.ThemeColor('editorCodeLens.foreground'),
          fontStyle: 'italic',
        },
      },
    }]);
  }

  private selectionChanged(event: vscode.TextEditorSelectionChangeEvent): void {
    const shown = this.shown;
    if (shown === undefined || event.textEditor !== shown.editor) {
      return;
    }
    if (keepsSuggestion(shown.suggestion, shown.anchorLine, event.selections[0].active.line)) {
      this.drawHint();
    } else {
      this.clear();
    }
  }

  /** Tab: the first press jumps to a suggestion elsewhere, the next applies it. */
  async accept(): Promise<void> {
    const shown = this.shown;
    if (shown === undefined) {
      return;
    }
    const { editor, suggestion, range } = shown;
    if (editor.document.version !== suggestion.version || editor.document.isClosed) {
      this.clear();
      return;
    }
    if (tabAction(suggestion, editor.selection.active) === 'jump') {
      editor.selection = new vscode.Selection(range.start, range.start);
      editor.revealRange(range, vscode.TextEditorRevealType.InCenterIfOutsideViewport);
      this.drawHint();
      return;
    }
    this.clear();
    const edit = new vscode.WorkspaceEdit();
    edit.replace(editor.document.uri, range, suggestion.text);
    if (!await vscode.workspace.applyEdit(edit)) {
      this.output.warn('next edit: VS Code did not apply the edit');
      return;
    }
    const end = endOfInsert(suggestion.range.start, suggestion.text);
    const at = new vscode.Position(end.line, end.character);
    if (vscode.window.activeTextEditor === editor) {
      editor.selection = new vscode.Selection(at, at);
    }
    const client = this.client();
    if (suggestion.command !== undefined && client !== undefined && client.state === State.Running) {
      try {
        await client.sendRequest(ExecuteCommandRequest.type, {
          command: suggestion.command.command,
          arguments: suggestion.command.arguments,
        });
      } catch (err) {
        this.output.warn(`next edit: ${suggestion.command.command} failed: ` +
          `${err instanceof Error ? err.message : String(err)}`);
      }
    }
  }

  /** Escape, another editor, the setting off: away with what is shown and what is asked. */
  dismiss(): void {
    this.cancelPending();
    this.clear();
  }

  private clear(): void {
    const shown = this.shown;
    if (shown === undefined) {
      return;
    }
    this.shown = undefined;
    for (const type of [this.removed, this.inserted, this.hint]) {
      shown.editor.setDecorations(type, []);
    }
    void vscode.commands.executeCommand('setContext', VISIBLE_CONTEXT, false);
  }

  dispose(): void {
    this.dismiss();
    for (const disposable of this.disposables) {
      disposable.dispose();
    }
    this.removed.dispose();
    this.inserted.dispose();
    this.hint.dispose();
  }
}
