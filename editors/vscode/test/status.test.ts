import assert from 'node:assert/strict';
import { test } from 'node:test';

import { parseEngineState, statusView } from '../src/status';

test('each engine state has its own text; problems are warnings', () => {
  assert.deepEqual(statusView('loading', 'loading bundled model'), {
    text: '$(loading~spin) dg-lsp: loading',
    tooltip: 'dg-lsp: loading bundled model\nClick for the dg-lsp output.',
    warning: false,
  });
  assert.deepEqual(statusView('ready', 'bundled model on cpu'), {
    text: '$(check) dg-lsp',
    tooltip: 'dg-lsp ready: bundled model on cpu\nClick for the dg-lsp output.',
    warning: false,
  });
  assert.deepEqual(statusView('unavailable', 'cannot load the model: no config.json'), {
    text: '$(warning) dg-lsp: unavailable',
    tooltip: 'dg-lsp: cannot load the model: no config.json\nClick for the dg-lsp output.',
    warning: true,
  });
  assert.equal(statusView('starting').text, '$(loading~spin) dg-lsp');
  assert.equal(statusView('running').text, '$(circle-outline) dg-lsp'); // no spinner: idle
  assert.equal(statusView('stopped').warning, true);
  assert.equal(statusView('paused', 'x').text, '$(question) dg-lsp: paused');
});

test('engineState params are checked before use', () => {
  assert.deepEqual(parseEngineState({ state: 'ready', message: 'm' }), { state: 'ready', message: 'm' });
  assert.deepEqual(parseEngineState({ state: 'loading' }), { state: 'loading', message: '' });
  assert.equal(parseEngineState({ message: 'no state' }), undefined);
  assert.equal(parseEngineState(null), undefined);
  assert.equal(parseEngineState('ready'), undefined);
});
