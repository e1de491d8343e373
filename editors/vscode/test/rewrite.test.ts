import assert from 'node:assert/strict';
import { test } from 'node:test';

import { REWRITE_COMMAND, checkInstruction, missingInstruction, rewriteArgs, withInstruction } from '../src/rewrite';

const RANGE = { start: { line: 3, character: 0 }, end: { line: 5, character: 12 } };

test('the command arguments are the documented shape', () => {
  assert.deepEqual(rewriteArgs('file:///a.py', 7, RANGE, 'add type hints'), {
    textDocument: { uri: 'file:///a.py', version: 7 },
    range: RANGE,
    instruction: 'add type hints',
  });
  assert.deepEqual(rewriteArgs('file:///a.py', 7, RANGE, 'x', 0.5).strength, 0.5);
  assert.equal('instruction' in rewriteArgs('file:///a.py', 7, RANGE), false);
});

test('only the rewrite command without an instruction asks for one', () => {
  const codeAction = [rewriteArgs('file:///a.py', 1, RANGE)];
  assert.equal(missingInstruction(REWRITE_COMMAND, codeAction), true);
  assert.equal(missingInstruction(REWRITE_COMMAND, [{ ...codeAction[0], instruction: '  ' }]), true);
  assert.equal(missingInstruction(REWRITE_COMMAND, [rewriteArgs('file:///a.py', 1, RANGE, 'go')]), false);
  assert.equal(missingInstruction('dg-lsp.stats', codeAction), false);
  assert.equal(missingInstruction(REWRITE_COMMAND, []), false);
});

test('the instruction is added to a copy of the first argument', () => {
  const args = [rewriteArgs('file:///a.py', 1, RANGE, undefined, 0.8), 'extra'];
  const filled = withInstruction(args, 'use a loop');
  assert.deepEqual(filled, [
    { textDocument: { uri: 'file:///a.py', version: 1 }, range: RANGE, strength: 0.8, instruction: 'use a loop' },
    'extra',
  ]);
  assert.equal('instruction' in (args[0] as object), false);
});

test('an empty instruction is refused by the input box', () => {
  assert.equal(checkInstruction('add docstring'), undefined);
  assert.equal(checkInstruction('   '), 'Say what to do with the selection, e.g. "add type hints"');
});
