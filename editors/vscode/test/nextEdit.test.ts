import assert from 'node:assert/strict';
import * as fs from 'node:fs';
import * as path from 'node:path';
import { test } from 'node:test';

import {
  ACCEPTED_COMMAND,
  CONTENT_MODIFIED,
  PREVIEW_CHARS,
  REQUEST_CANCELLED,
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
} from '../src/nextEdit';

const URI = 'file:///a.py';
// `count` on line 3 (0-based), columns 8-13, becomes `total`
const RANGE = { start: { line: 3, character: 8 }, end: { line: 3, character: 13 } };
const COMMAND = { title: 'Accept next edit', command: ACCEPTED_COMMAND, arguments: [URI, 6] };
const ANSWER = { edits: [{ text: 'total', textDocument: { uri: URI, version: 6 }, range: RANGE, command: COMMAND }] };
const SUGGESTION: Suggestion = { uri: URI, version: 6, range: RANGE, text: 'total', command: COMMAND };

test('the request carries the version and the cursor', () => {
  assert.deepEqual(inlineEditParams(URI, 6, { line: 1, character: 9 }), {
    textDocument: { uri: URI, version: 6 },
    position: { line: 1, character: 9 },
  });
});

test('only a server that advertises copilotInlineEdit is asked', () => {
  assert.equal(serverOffersNextEdit({ experimental: { copilotInlineEdit: true } }), true);
  assert.equal(serverOffersNextEdit({ experimental: { copilotInlineEdit: 'yes' } }), false);
  assert.equal(serverOffersNextEdit({ experimental: {} }), false);
  assert.equal(serverOffersNextEdit({}), false);
  assert.equal(serverOffersNextEdit(undefined), false);
});

test("the server's answer becomes a range and a text", () => {
  assert.deepEqual(parseInlineEdits(ANSWER, URI, 6), SUGGESTION);
  // nothing to suggest, or no answer
  assert.equal(parseInlineEdits({ edits: [] }, URI, 6), undefined);
  assert.equal(parseInlineEdits(null, URI, 6), undefined);
  assert.equal(parseInlineEdits({ edits: 'x' }, URI, 6), undefined);
  // an answer about another version or document is not this request's
  assert.equal(parseInlineEdits(ANSWER, URI, 7), undefined);
  assert.equal(parseInlineEdits(ANSWER, 'file:///b.py', 6), undefined);
  // malformed edits are skipped; the first good alternative is taken
  const reversed = { start: RANGE.end, end: RANGE.start };
  const negative = { start: { line: -1, character: 0 }, end: RANGE.end };
  const answer = { edits: [
    { text: 'a', range: reversed },
    { text: 'b', range: negative },
    { text: 3, range: RANGE },
    { text: 'c', range: { start: RANGE.start } },
    { text: 'total', range: RANGE, command: { command: '' } },
    { text: 'other', range: RANGE },
  ] };
  assert.deepEqual(parseInlineEdits(answer, URI, 6), { uri: URI, version: 6, range: RANGE, text: 'total' });
  // an empty range is an insertion
  const insert = { start: RANGE.end, end: RANGE.end };
  assert.deepEqual(parseInlineEdits({ edits: [{ text: 'x', range: insert }] }, URI, 6)?.range, insert);
});

test('an answer for a stale version or a moved-on editor is ignored', () => {
  const asked = { uri: URI, version: 6 };
  assert.equal(isStale(asked, { uri: URI, version: 6 }), false);
  assert.equal(isStale(asked, { uri: URI, version: 7 }), true); // typed meanwhile
  assert.equal(isStale(asked, { uri: 'file:///b.py', version: 6 }), true); // another editor
  assert.equal(isStale(asked, undefined), true); // no editor
  // the server's own "stale" and "superseded" errors are not worth a log line
  assert.equal(isQuietError({ code: CONTENT_MODIFIED, message: 'x' }), true);
  assert.equal(isQuietError(Object.assign(new Error('cancelled'), { code: REQUEST_CANCELLED })), true);
  assert.equal(isQuietError({ code: -32603 }), false);
  assert.equal(isQuietError('boom'), false);
});

test('Tab jumps to a suggestion on another line, then applies it', () => {
  assert.equal(tabAction(SUGGESTION, { line: 1, character: 9 }), 'jump');
  assert.equal(tabAction(SUGGESTION, { line: 5, character: 0 }), 'jump');
  assert.equal(tabAction(SUGGESTION, { line: 3, character: 8 }), 'apply');
  assert.equal(tabAction(SUGGESTION, { line: 3, character: 0 }), 'apply'); // anywhere on its line
  const twoLines = { ...SUGGESTION, range: { start: RANGE.start, end: { line: 4, character: 2 } } };
  assert.equal(tabAction(twoLines, { line: 4, character: 0 }), 'apply');
  // the hint says where Tab goes, only while it jumps
  assert.equal(jumpHint(SUGGESTION, { line: 1, character: 9 }), 'Tab ↓ next edit on line 4');
  assert.equal(jumpHint(SUGGESTION, { line: 6, character: 0 }), 'Tab ↑ next edit on line 4');
  assert.equal(jumpHint(SUGGESTION, { line: 3, character: 8 }), undefined);
});

test('a shown suggestion stays while the cursor is between where it was and the suggestion', () => {
  // shown with the cursor on line 1 (the user's own edit), the suggestion on line 3
  assert.equal(keepsSuggestion(SUGGESTION, 1, 1), true);
  assert.equal(keepsSuggestion(SUGGESTION, 1, 2), true);
  assert.equal(keepsSuggestion(SUGGESTION, 1, 3), true); // Tab's jump
  assert.equal(keepsSuggestion(SUGGESTION, 1, 0), false);
  assert.equal(keepsSuggestion(SUGGESTION, 1, 4), false);
  // a suggestion above the cursor
  assert.equal(keepsSuggestion(SUGGESTION, 6, 5), true);
  assert.equal(keepsSuggestion(SUGGESTION, 6, 7), false);
});

test('the new text is drawn on one line, and the cursor ends after it', () => {
  assert.equal(previewText('total'), 'total');
  assert.equal(previewText('a\nb\r\nc'), 'a ⏎ b ⏎ c');
  const long = previewText('x'.repeat(200));
  assert.equal(long.length, PREVIEW_CHARS);
  assert.ok(long.endsWith('…'));
  assert.deepEqual(endOfInsert(RANGE.start, 'total'), { line: 3, character: 13 });
  assert.deepEqual(endOfInsert(RANGE.start, ''), RANGE.start);
  assert.deepEqual(endOfInsert(RANGE.start, 'a\n  bc'), { line: 4, character: 4 });
});

test('didShowInlineEdit carries the command; package.json binds Tab and Escape', () => {
  assert.deepEqual(shownParams(SUGGESTION), { item: { command: COMMAND } });
  assert.deepEqual(shownParams({ ...SUGGESTION, command: undefined }), { item: {} });

  // out/test/ → the package's root
  const manifest = JSON.parse(fs.readFileSync(path.join(__dirname, '..', '..', 'package.json'), 'utf8'));
  const when = `editorTextFocus && ${VISIBLE_CONTEXT} && !inlineSuggestionVisible && !suggestWidgetVisible`;
  assert.deepEqual(manifest.contributes.keybindings, [
    { command: 'dg-lsp.acceptNextEdit', key: 'tab', when },
    { command: 'dg-lsp.dismissNextEdit', key: 'escape', when },
  ]);
  const commands = manifest.contributes.commands.map((c: { command: string }) => c.command);
  assert.ok(commands.includes('dg-lsp.acceptNextEdit') && commands.includes('dg-lsp.dismissNextEdit'));
  const properties = manifest.contributes.configuration.properties;
  assert.equal(properties['dg-lsp.nextEdit.enabled'].default, true);
  assert.equal(properties['dg-lsp.nextEdit.debounceMs'].default, 250);
});
