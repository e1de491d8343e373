import assert from 'node:assert/strict';
import * as fs from 'node:fs';
import * as path from 'node:path';
import { test } from 'node:test';

import {
  DEFAULTS,
  MACHINE_SETTINGS,
  needsRestart,
  readConfig,
  serverCommand,
  serverSettings,
} from '../src/config';

const HOME = '/home/ada';

function from(values: Record<string, unknown>): (key: string) => unknown {
  return (key) => values[key];
}

/** The settings as VS Code holds them: the user's, and a workspace's on top of them. */
function settings(user: Record<string, unknown>, workspace: Record<string, unknown> = {}) {
  return readConfig(from({ ...user, ...workspace }), from(user));
}

test('no settings: the defaults, and the server gets its own defaults', () => {
  const config = settings({});
  assert.deepEqual(config, DEFAULTS);
  assert.deepEqual(serverSettings(config, HOME), {
    model: null,
    device: 'auto',
    engine: 'resident',
    engineTokenFile: null,
    sampler: { name: 'threshold', threshold: 0.9, cutoff: 0.5, temperature: 0 },
    minConfidence: 0.15,
    repositoryContext: true,
    languages: null,
  });
  assert.deepEqual(serverCommand(config, HOME), { command: 'dg-lsp', args: ['serve'] });
});

test('every setting maps to the server key of dg_lsp/settings.py', () => {
  const config = settings({
    path: '~/venv/bin/dg-lsp',
    serverArgs: ['--tcp', 'ignored:0'],
    model: '~/models/Dream-Coder-7B',
    device: 'cuda',
    engine: 'inproc',
    'sampler.name': 'learned',
    'sampler.threshold': 0.75,
    'sampler.cutoff': 0.4,
    'sampler.temperature': 0.2,
    minConfidence: 0.3,
    repositoryContext: false,
    languages: ['python', ' rust '],
    completionMenu: true,
  });
  assert.deepEqual(serverSettings(config, HOME), {
    model: '/home/ada/models/Dream-Coder-7B',
    device: 'cuda',
    engine: 'inproc',
    engineTokenFile: null,
    sampler: { name: 'learned', threshold: 0.75, cutoff: 0.4, temperature: 0.2 },
    minConfidence: 0.3,
    repositoryContext: false,
    languages: ['python', 'rust'],
  });
  assert.deepEqual(serverCommand(config, HOME), {
    command: '/home/ada/venv/bin/dg-lsp',
    args: ['serve', '--tcp', 'ignored:0'],
  });
  assert.equal(config.completionMenu, true);
});

test('values of the wrong type or out of range fall back to the defaults', () => {
  const config = settings({
    path: '   ',
    serverArgs: 'serve',
    model: 7,
    device: 'tpu',
    engine: 'remote',
    'sampler.name': 'beam',
    'sampler.threshold': 3,
    'sampler.temperature': -1,
    minConfidence: 2,
    repositoryContext: 'no',
    languages: ['python', 3, ''],
    completionMenu: 'yes',
  });
  assert.deepEqual(config, {
    ...DEFAULTS,
    sampler: { name: 'threshold', threshold: 1, cutoff: 0.5, temperature: 0 },
    minConfidence: 1,
    languages: ['python'],
  });
});

test('the next-edit settings: checked, kept by the extension, no restart', () => {
  assert.deepEqual(settings({}).nextEdit, { enabled: true, debounceMs: 250 });
  const config = settings({ 'nextEdit.enabled': false, 'nextEdit.debounceMs': 40.4 });
  assert.deepEqual(config.nextEdit, { enabled: false, debounceMs: 40 });
  assert.deepEqual(settings({ 'nextEdit.enabled': 'no', 'nextEdit.debounceMs': -5 }).nextEdit,
    { enabled: true, debounceMs: 250 });
  assert.equal(settings({ 'nextEdit.debounceMs': 1e9 }).nextEdit.debounceMs, 5000);
  assert.equal('nextEdit' in serverSettings(config, HOME), false); // not the server's
  assert.equal(needsRestart(settings({}), config), false);
});

test('only the executable and its arguments need a new server process', () => {
  const base = settings({});
  assert.equal(needsRestart(base, { ...base, path: '/opt/dg-lsp' }), true);
  assert.equal(needsRestart(base, { ...base, serverArgs: ['--engine', 'inproc'] }), true);
  assert.equal(needsRestart({ ...base, serverArgs: ['a'] }, { ...base, serverArgs: ['b'] }), true);
  assert.equal(needsRestart(base, { ...base, model: '/m', device: 'cpu', languages: ['go'] }), false);
});

test('a workspace cannot choose the program, the engine URL or the token file', () => {
  // what a cloned repository's .vscode/settings.json could hold
  const workspace = {
    path: '/tmp/repo/bin/evil',
    serverArgs: ['--engine', 'http://198.51.100.7:8000'],
    engine: 'https://198.51.100.7:8000',
    engineTokenFile: '~/.ssh/id_ed25519',
    model: '/tmp/repo/model',
    'sampler.temperature': 0.3,
  };
  const config = settings({}, workspace);
  assert.deepEqual(serverCommand(config, HOME), { command: 'dg-lsp', args: ['serve'] });
  const server = serverSettings(config, HOME);
  assert.equal(server.engine, 'resident');
  assert.equal(server.engineTokenFile, null);
  // the others are a workspace's to choose: what runs where the user said, and how
  assert.equal(server.model, '/tmp/repo/model');
  assert.equal(server.sampler.temperature, 0.3);
  // the user's own values stand, whatever the workspace says
  const mine = settings({ path: '~/venv/bin/dg-lsp', engine: 'inproc' }, workspace);
  assert.equal(serverCommand(mine, HOME).command, '/home/ada/venv/bin/dg-lsp');
  assert.equal(serverSettings(mine, HOME).engine, 'inproc');
});

test("the user's team engine: its URL and token file reach the server", () => {
  const config = settings({ engine: 'https://head:8000', engineTokenFile: '~/.dg-team-token' });
  const server = serverSettings(config, HOME);
  assert.equal(server.engine, 'https://head:8000');
  assert.equal(server.engineTokenFile, '/home/ada/.dg-team-token');
  assert.equal(settings({ engine: 'ftp://head' }).engine, 'resident');
});

test('package.json makes exactly MACHINE_SETTINGS machine-scoped', () => {
  // out/test/ → the extension's folder
  const manifest = JSON.parse(fs.readFileSync(path.join(__dirname, '..', '..', 'package.json'), 'utf8'));
  const properties: Record<string, { scope?: string }> = manifest.contributes.configuration.properties;
  const machine = Object.keys(properties).filter((key) => properties[key].scope === 'machine');
  assert.deepEqual(machine.sort(), MACHINE_SETTINGS.map((key) => `dg-lsp.${key}`).sort());
});
