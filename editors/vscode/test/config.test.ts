import assert from 'node:assert/strict';
import { test } from 'node:test';

import { DEFAULTS, needsRestart, readConfig, serverCommand, serverSettings } from '../src/config';

const HOME = '/home/ada';

function from(values: Record<string, unknown>): (key: string) => unknown {
  return (key) => values[key];
}

test('no settings: the defaults, and the server gets its own defaults', () => {
  const config = readConfig(from({}));
  assert.deepEqual(config, DEFAULTS);
  assert.deepEqual(serverSettings(config, HOME), {
    model: null,
    device: 'auto',
    engine: 'resident',
    sampler: { name: 'threshold', threshold: 0.9, cutoff: 0.5, temperature: 0 },
    languages: null,
  });
  assert.deepEqual(serverCommand(config, HOME), { command: 'dg-lsp', args: ['serve'] });
});

test('every setting maps to the server key of dg_lsp/settings.py', () => {
  const config = readConfig(from({
    path: '~/venv/bin/dg-lsp',
    serverArgs: ['--tcp', 'ignored:0'],
    model: '~/models/Dream-Coder-7B',
    device: 'cuda',
    engine: 'inproc',
    'sampler.name': 'learned',
    'sampler.threshold': 0.75,
    'sampler.cutoff': 0.4,
    'sampler.temperature': 0.2,
    languages: ['python', ' rust '],
    completionMenu: true,
  }));
  assert.deepEqual(serverSettings(config, HOME), {
    model: '/home/ada/models/Dream-Coder-7B',
    device: 'cuda',
    engine: 'inproc',
    sampler: { name: 'learned', threshold: 0.75, cutoff: 0.4, temperature: 0.2 },
    languages: ['python', 'rust'],
  });
  assert.deepEqual(serverCommand(config, HOME), {
    command: '/home/ada/venv/bin/dg-lsp',
    args: ['serve', '--tcp', 'ignored:0'],
  });
  assert.equal(config.completionMenu, true);
});

test('values of the wrong type or out of range fall back to the defaults', () => {
  const config = readConfig(from({
    path: '   ',
    serverArgs: 'serve',
    model: 7,
    device: 'tpu',
    engine: 'remote',
    'sampler.name': 'beam',
    'sampler.threshold': 3,
    'sampler.temperature': -1,
    languages: ['python', 3, ''],
    completionMenu: 'yes',
  }));
  assert.deepEqual(config, {
    ...DEFAULTS,
    sampler: { name: 'threshold', threshold: 1, cutoff: 0.5, temperature: 0 },
    languages: ['python'],
  });
});

test('only the executable and its arguments need a new server process', () => {
  const base = readConfig(from({}));
  assert.equal(needsRestart(base, { ...base, path: '/opt/dg-lsp' }), true);
  assert.equal(needsRestart(base, { ...base, serverArgs: ['--engine', 'inproc'] }), true);
  assert.equal(needsRestart({ ...base, serverArgs: ['a'] }, { ...base, serverArgs: ['b'] }), true);
  assert.equal(needsRestart(base, { ...base, model: '/m', device: 'cpu', languages: ['go'] }), false);
});
