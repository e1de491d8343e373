import assert from 'node:assert/strict';
import { test } from 'node:test';

import {
  SuggestionParams,
  TRIGGER_INLINE_SUGGESTION,
  parseEngineState,
  parseSuggestion,
  statusView,
  suggestionView,
} from '../src/status';

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

const HIDDEN: SuggestionParams = {
  uri: 'file:///a.py',
  position: { line: 7, character: 10 },
  asked: false,
  shown: false,
  belowGate: false,
  confidence: 0.12,
  reason: 'unsure (0.12)',
};

test('a suggestion the gate hid says why, and how to see it anyway', () => {
  assert.deepEqual(suggestionView(HIDDEN), {
    text: '$(eye-closed) dg-lsp: unsure (0.12)',
    tooltip: 'dg-lsp hid a suggestion here: unsure (0.12).\n'
      + 'Trigger Inline Suggestion (Alt+\\) shows it anyway; so does a click here.',
    warning: false,
    command: TRIGGER_INLINE_SUGGESTION,
  });
  assert.equal(TRIGGER_INLINE_SUGGESTION, 'editor.action.inlineSuggest.trigger');
});

test('a suggestion shown below the gate because it was asked for carries its confidence', () => {
  const asked = { ...HIDDEN, asked: true, shown: true, belowGate: true, reason: '' };
  assert.deepEqual(suggestionView(asked), {
    text: '$(eye) dg-lsp: 0.12 (asked)',
    tooltip: 'dg-lsp: shown because you asked for it; the confidence gate would have hidden it '
      + '(0.12 that it is close to right, below dg-lsp.minConfidence)\nClick for the dg-lsp output.',
    warning: false,
  });
  assert.equal(suggestionView({ ...asked, confidence: 0.456 })?.text, '$(eye) dg-lsp: 0.46 (asked)');
});

test('nothing to show, asked or not: the reason, and no promise that asking helps', () => {
  const nothing = { ...HIDDEN, confidence: null, reason: 'nothing usable' };
  const expected = {
    text: '$(eye-closed) dg-lsp: nothing usable',
    tooltip: 'dg-lsp: no suggestion here: nothing usable\nClick for the dg-lsp output.',
    warning: false,
  };
  assert.deepEqual(suggestionView(nothing), expected);
  assert.deepEqual(suggestionView({ ...nothing, asked: true }), expected);
});

test('a suggestion shown as usual gives the status bar back to the engine state', () => {
  const shown = { ...HIDDEN, shown: true, confidence: 0.8, reason: '' };
  assert.equal(suggestionView(shown), undefined);
  assert.equal(suggestionView({ ...shown, asked: true }), undefined); // asked, above the gate
  assert.equal(suggestionView({ ...HIDDEN, reason: '' }), undefined); // hidden without a reason
});

test('suggestion params are checked before use', () => {
  assert.deepEqual(parseSuggestion({ ...HIDDEN }), HIDDEN);
  // a missing belowGate, confidence or reason reads as false, null, ""
  const { belowGate, confidence, reason, ...bare } = HIDDEN;
  assert.deepEqual(parseSuggestion(bare), { ...bare, belowGate: false, confidence: null, reason: '' });
  assert.equal(parseSuggestion({ ...HIDDEN, confidence: 'high' })?.confidence, null);
  assert.equal(parseSuggestion({ ...HIDDEN, shown: 'no' }), undefined);
  assert.equal(parseSuggestion({ ...HIDDEN, position: null }), undefined);
  assert.equal(parseSuggestion({ ...HIDDEN, uri: 3 }), undefined);
  assert.equal(parseSuggestion(null), undefined);
});
