/**
 * "Complete at every cursor": the server's `dg-lsp/fillHoles` request, one completion per
 * cursor, each the cursor's own, written together in one canvas.
 *
 * - request `{textDocument: {uri, version}, positions}` (the cursors' active positions);
 * - answer `{items: [{position, text, range}]}`, one per position in the order sent, `text`
 *   replacing `range` ("" where the model wrote nothing usable), or an error the server has
 *   already shown (too many cursors, a stale version).
 *
 * The extension applies every non-empty item in one edit, while the document is still at the
 * version asked about. No `vscode` import, so the unit tests run under plain node.
 */

import type { Position, Range } from './rewrite';

export const FILL_HOLES_REQUEST = 'dg-lsp/fillHoles';

export interface FillHolesParams {
  textDocument: { uri: string; version: number };
  positions: Position[];
}

/** One cursor's text, checked: replace `range` with `text`. */
export interface CursorFill {
  position: Position;
  range: Range;
  text: string;
}

export function fillHolesParams(uri: string, version: number, positions: readonly Position[]): FillHolesParams {
  return { textDocument: { uri, version }, positions: positions.map((p) => ({ ...p })) };
}

function isRecord(value: unknown): value is Record<string, unknown> {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}

function position(value: unknown): Position | undefined {
  if (!isRecord(value)) {
    return undefined;
  }
  const { line, character } = value;
  return Number.isInteger(line) && Number.isInteger(character) && (line as number) >= 0 && (character as number) >= 0
    ? { line: line as number, character: character as number }
    : undefined;
}

function range(value: unknown): Range | undefined {
  if (!isRecord(value)) {
    return undefined;
  }
  const start = position(value.start);
  const end = position(value.end);
  return start !== undefined && end !== undefined ? { start, end } : undefined;
}

/** The answer's items, checked; undefined when the answer is not the documented shape. */
export function parseFills(answer: unknown): CursorFill[] | undefined {
  if (!isRecord(answer) || !Array.isArray(answer.items)) {
    return undefined;
  }
  const fills: CursorFill[] = [];
  for (const item of answer.items) {
    const at = isRecord(item) ? position(item.position) : undefined;
    const where = isRecord(item) ? range(item.range) : undefined;
    if (at === undefined || where === undefined || typeof item.text !== 'string') {
      return undefined;
    }
    fills.push({ position: at, range: where, text: item.text });
  }
  return fills;
}

function before(a: Position, b: Position): boolean {
  return a.line < b.line || (a.line === b.line && a.character < b.character);
}

function same(a: Position, b: Position): boolean {
  return a.line === b.line && a.character === b.character;
}

/**
 * The replacements to make, in document order: every fill with text, one per place (two
 * cursors at one place insert once), none overlapping an earlier one.
 */
export function cursorEdits(fills: readonly CursorFill[]): CursorFill[] {
  const sorted = fills
    .filter((fill) => fill.text !== '')
    .sort((a, b) => (before(a.range.start, b.range.start) ? -1 : before(b.range.start, a.range.start) ? 1 : 0));
  const edits: CursorFill[] = [];
  for (const fill of sorted) {
    const last = edits[edits.length - 1];
    if (last === undefined || (!before(fill.range.start, last.range.end) && !same(fill.range.start, last.range.start))) {
      edits.push(fill);
    }
  }
  return edits;
}
