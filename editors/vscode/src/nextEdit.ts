/**
 * Next-edit suggestions: the server's `textDocument/copilotInlineEdit` and what the editor does
 * with its answer. The server suggests the edit the user's last edit implies (after `count`
 * became `total` on one line, the `count` two lines down); the extension shows it with
 * decorations (src/nextEditView.ts), Tab jumps to it and then applies it, Escape dismisses it.
 *
 * - request `{textDocument: {uri, version}, position}`; answer `{edits: [{text, textDocument:
 *   {uri, version}, range, command}]}` (alternatives; empty when there is nothing), or the
 *   ContentModified error when the server has another version of the document;
 * - notification `textDocument/didShowInlineEdit {item: {command}}` once one is shown;
 * - the edit's `command` (`dg-lsp.inlineEditAccepted`) is executed on the server once applied.
 *
 * This module holds the decisions (what an answer means, whether it is stale, what Tab does,
 * when a shown suggestion goes away). No `vscode` import, so the unit tests run under plain node.
 */

import type { Position, Range } from './rewrite';

export const INLINE_EDIT_REQUEST = 'textDocument/copilotInlineEdit';
export const DID_SHOW_INLINE_EDIT = 'textDocument/didShowInlineEdit';
export const ACCEPTED_COMMAND = 'dg-lsp.inlineEditAccepted';
/** The `when`-clause context key that is true while a suggestion is shown. */
export const VISIBLE_CONTEXT = 'dg-lsp.nextEditVisible';
/** LSP's ContentModified: the server no longer has the version asked about. */
export const CONTENT_MODIFIED = -32801;
/** LSP's RequestCancelled: a newer request (or the client) cancelled this one. */
export const REQUEST_CANCELLED = -32800;
/** The longest preview drawn after the replaced range. */
export const PREVIEW_CHARS = 80;

export interface Command {
  title: string;
  command: string;
  arguments?: unknown[];
}

export interface DocumentRef {
  uri: string;
  version: number;
}

export interface InlineEditParams {
  textDocument: DocumentRef;
  position: Position;
}

/** One suggestion, checked: replace `range` of `uri` at `version` with `text`. */
export interface Suggestion {
  uri: string;
  version: number;
  range: Range;
  text: string;
  command?: Command;
}

export type TabAction = 'jump' | 'apply';

export function inlineEditParams(uri: string, version: number, position: Position): InlineEditParams {
  return { textDocument: { uri, version }, position: { ...position } };
}

/** Whether the server's initialize result advertises the request. */
export function serverOffersNextEdit(capabilities: unknown): boolean {
  if (typeof capabilities !== 'object' || capabilities === null) {
    return false;
  }
  const experimental = (capabilities as Record<string, unknown>).experimental;
  return typeof experimental === 'object' && experimental !== null &&
    (experimental as Record<string, unknown>).copilotInlineEdit === true;
}

function isRecord(value: unknown): value is Record<string, unknown> {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}

function position(value: unknown): Position | undefined {
  if (!isRecord(value)) {
    return undefined;
  }
  const { line, character } = value;
  return Number.isInteger(line) && Number.isInteger(character) &&
    (line as number) >= 0 && (character as number) >= 0
    ? { line: line as number, character: character as number }
    : undefined;
}

function before(a: Position, b: Position): boolean {
  return a.line < b.line || (a.line === b.line && a.character < b.character);
}

function range(value: unknown): Range | undefined {
  if (!isRecord(value)) {
    return undefined;
  }
  const start = position(value.start);
  const end = position(value.end);
  return start !== undefined && end !== undefined && !before(end, start) ? { start, end } : undefined;
}

function command(value: unknown): Command | undefined {
  if (!isRecord(value) || typeof value.command !== 'string' || value.command === '') {
    return undefined;
  }
  const found: Command = { title: typeof value.title === 'string' ? value.title : '', command: value.command };
  if (Array.isArray(value.arguments)) {
    found.arguments = [...value.arguments];
  }
  return found;
}

/**
 * The suggestion to show from the server's answer to a request for `uri` at `version`: the
 * first well-formed edit of that document and version (the edits are alternatives), or
 * undefined for an empty or malformed answer.
 */
export function parseInlineEdits(result: unknown, uri: string, version: number): Suggestion | undefined {
  if (!isRecord(result) || !Array.isArray(result.edits)) {
    return undefined;
  }
  for (const edit of result.edits) {
    if (!isRecord(edit) || typeof edit.text !== 'string') {
      continue;
    }
    const doc = edit.textDocument;
    if (isRecord(doc) && (doc.uri !== uri || (doc.version !== undefined && doc.version !== version))) {
      continue; // another document, or another version of this one
    }
    const where = range(edit.range);
    if (where === undefined) {
      continue;
    }
    const suggestion: Suggestion = { uri, version, range: where, text: edit.text };
    const cmd = command(edit.command);
    if (cmd !== undefined) {
      suggestion.command = cmd;
    }
    return suggestion;
  }
  return undefined;
}

/**
 * Whether an answer to a request about `asked` has nothing to do with the editor now: the
 * active editor shows another document (or none), or the document changed since.
 */
export function isStale(asked: DocumentRef, current: DocumentRef | undefined): boolean {
  return current === undefined || current.uri !== asked.uri || current.version !== asked.version;
}

/** The errors a next-edit request ends with that say nothing is wrong (stale or superseded). */
export function isQuietError(error: unknown): boolean {
  const code = isRecord(error) || error instanceof Error ? (error as { code?: unknown }).code : undefined;
  return code === CONTENT_MODIFIED || code === REQUEST_CANCELLED;
}

/** Tab: apply the suggestion when the cursor is on its lines, otherwise jump to it first. */
export function tabAction(suggestion: Suggestion, cursor: Position): TabAction {
  return cursor.line >= suggestion.range.start.line && cursor.line <= suggestion.range.end.line
    ? 'apply'
    : 'jump';
}

/**
 * Whether a shown suggestion stays after the cursor moved to `cursorLine`: it does while the
 * cursor is anywhere from the line it was on when the suggestion came (`anchorLine`) to the
 * suggestion's lines, both included; moving elsewhere dismisses it.
 */
export function keepsSuggestion(suggestion: Suggestion, anchorLine: number, cursorLine: number): boolean {
  const first = Math.min(anchorLine, suggestion.range.start.line);
  const last = Math.max(anchorLine, suggestion.range.end.line);
  return cursorLine >= first && cursorLine <= last;
}

/** The new text as drawn after the replaced range: one line, at most PREVIEW_CHARS. */
export function previewText(text: string): string {
  const oneLine = text.replace(/\r?\n/g, ' ⏎ ');
  return oneLine.length > PREVIEW_CHARS ? `${oneLine.slice(0, PREVIEW_CHARS - 1)}…` : oneLine;
}

/** The hint drawn at the cursor's line while the suggestion is elsewhere (undefined on it). */
export function jumpHint(suggestion: Suggestion, cursor: Position): string | undefined {
  if (tabAction(suggestion, cursor) === 'apply') {
    return undefined;
  }
  const arrow = suggestion.range.start.line > cursor.line ? '↓' : '↑';
  return `Tab ${arrow} next edit on line ${suggestion.range.start.line + 1}`;
}

/** Where the cursor goes after the suggestion is applied: the end of the new text. */
export function endOfInsert(start: Position, text: string): Position {
  const lines = text.split(/\r?\n/);
  const last = lines[lines.length - 1];
  return lines.length === 1
    ? { line: start.line, character: start.character + last.length }
    : { line: start.line + lines.length - 1, character: last.length };
}

/** The `didShowInlineEdit` notification's params. */
export function shownParams(suggestion: Suggestion): { item: { command?: Command } } {
  return { item: suggestion.command === undefined ? {} : { command: suggestion.command } };
}

