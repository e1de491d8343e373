import assert from 'node:assert/strict';
import { test } from 'node:test';

import { cursorEdits, fillHolesParams, parseFills } from '../src/cursors';

const at = (line: number, character: number) => ({ line, character });
const fill = (line: number, character: number, text: string, width = 0) => ({
  position: at(line, character),
  range: { start: at(line, character), end: at(line, character + width) },
  text,
});

test('the request carries every cursor in the order given', () => {
  assert.deepEqual(fillHolesParams('file:///a.py', 4, [at(7, 8), at(6, 8)]), {
    textDocument: { uri: 'file:///a.py', version: 4 },
    positions: [at(7, 8), at(6, 8)],
  });
});

test('an answer of the documented shape is read, anything else refused', () => {
  const answer = { items: [fill(7, 8, 'y * 2'), fill(6, 8, '')] };
  assert.deepEqual(parseFills(answer), answer.items);
  assert.equal(parseFills(null), undefined);
  assert.equal(parseFills({ items: [{ position: at(1, 1), text: 'x' }] }), undefined);
  assert.equal(parseFills({ items: [{ ...fill(1, 1, 'x'), text: 3 }] }), undefined);
  assert.equal(parseFills({ items: [fill(-1, 0, 'x')] }), undefined);
});

test('each cursor gets its own text, in document order, once per place', () => {
  const edits = cursorEdits([fill(7, 8, 'y * 2'), fill(6, 8, 'x + 1'), fill(2, 0, ''), fill(7, 8, 'y * 2')]);
  assert.deepEqual(edits, [fill(6, 8, 'x + 1'), fill(7, 8, 'y * 2')]);
});

test('a fill that would overlap an earlier one is left out', () => {
  const edits = cursorEdits([fill(3, 2, 'abc)', 2), fill(3, 3, 'z'), fill(3, 4, 'w')]);
  assert.deepEqual(edits, [fill(3, 2, 'abc)', 2), fill(3, 4, 'w')]);
});
