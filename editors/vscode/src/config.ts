/**
 * The extension's settings (`dg-lsp.*` in VS Code) and what they become for the server:
 * the command line that starts `dg-lsp`, and the camelCase settings object sent as
 * `initializationOptions` and in `workspace/didChangeConfiguration` (keys as in the server's
 * dg_lsp/settings.py). No `vscode` import, so the unit tests run under plain node.
 *
 * The settings that choose a program to run, a URL to send code to or a file to send
 * (MACHINE_SETTINGS) are `"scope": "machine"` in package.json, so VS Code ignores them in a
 * workspace's or folder's settings.json, and are read here from the user's own value only
 * (`inspect(key).globalValue`), never from the merged one: a cloned repository's
 * `.vscode/settings.json` cannot set them.
 */

import * as os from 'node:os';
import * as path from 'node:path';

export const SECTION = 'dg-lsp';
export const DEVICES = ['auto', 'cpu', 'cuda', 'mps'] as const;
export const ENGINES = ['resident', 'inproc'] as const;
/** The keys only the user's settings may set (package.json gives them `"scope": "machine"`). */
export const MACHINE_SETTINGS = ['path', 'serverArgs', 'engine', 'engineTokenFile'] as const;
export const SAMPLERS = ['threshold', 'topk', 'entropy', 'learned'] as const;

export interface ExtensionConfig {
  path: string;
  serverArgs: string[];
  model: string;
  device: string;
  engine: string;
  engineTokenFile: string;
  sampler: { name: string; threshold: number; cutoff: number; temperature: number };
  minConfidence: number;
  /** Read the rest of the workspace (the server's index), not only the open files. */
  repositoryContext: boolean;
  languages: string[];
  completionMenu: boolean;
  /** Next-edit suggestions (src/nextEdit.ts): the extension's own, not sent to the server. */
  nextEdit: { enabled: boolean; debounceMs: number };
}

/** What the server reads; null means "the server's default" (bundled model, every language). */
export interface ServerSettings {
  model: string | null;
  device: string;
  engine: string;
  engineTokenFile: string | null;
  sampler: { name: string; threshold: number; cutoff: number; temperature: number };
  minConfidence: number;
  repositoryContext: boolean;
  languages: string[] | null;
}

export const DEFAULTS: ExtensionConfig = {
  path: 'dg-lsp',
  serverArgs: [],
  model: '',
  device: 'auto',
  engine: 'resident',
  engineTokenFile: '',
  sampler: { name: 'threshold', threshold: 0.9, cutoff: 0.5, temperature: 0 },
  minConfidence: 0.15,
  repositoryContext: true,
  languages: [],
  completionMenu: false,
  nextEdit: { enabled: true, debounceMs: 250 },
};

/** The longest wait after a change before asking for a next edit. */
export const MAX_DEBOUNCE_MS = 5000;

/** A team engine's URL (`dg-engine serve --ray`); the server checks the rest. */
export function isEngineUrl(value: string): boolean {
  return /^https?:\/\/\S+$/i.test(value);
}

/**
 * Reads every setting, keeping defaults for bad values: MACHINE_SETTINGS through `userValue`
 * (VS Code: `inspect(key)?.globalValue`, undefined when the user set none), the others through
 * `merged` (a WorkspaceConfiguration's `get`: default < user < workspace < folder).
 */
export function readConfig(
  merged: (key: string) => unknown,
  userValue: (key: string) => unknown,
): ExtensionConfig {
  const machine: readonly string[] = MACHINE_SETTINGS;
  const get = (key: string): unknown => (machine.includes(key) ? userValue(key) : merged(key));
  const str = (key: string, fallback: string): string => {
    const value = get(key);
    return typeof value === 'string' ? value.trim() : fallback;
  };
  const oneOf = (key: string, allowed: readonly string[], fallback: string): string => {
    const value = get(key);
    return typeof value === 'string' && allowed.includes(value) ? value : fallback;
  };
  const num = (key: string, fallback: number): number => {
    const value = get(key);
    return typeof value === 'number' && Number.isFinite(value) && value >= 0 ? value : fallback;
  };
  const strings = (key: string): string[] => {
    const value = get(key);
    return Array.isArray(value) ? value.filter((v): v is string => typeof v === 'string') : [];
  };
  return {
    path: str('path', DEFAULTS.path) || DEFAULTS.path,
    serverArgs: strings('serverArgs'),
    model: str('model', DEFAULTS.model),
    device: oneOf('device', DEVICES, DEFAULTS.device),
    engine: engineOf(str('engine', DEFAULTS.engine)),
    engineTokenFile: str('engineTokenFile', DEFAULTS.engineTokenFile),
    sampler: {
      name: oneOf('sampler.name', SAMPLERS, DEFAULTS.sampler.name),
      threshold: Math.min(1, num('sampler.threshold', DEFAULTS.sampler.threshold)),
      cutoff: Math.min(1, num('sampler.cutoff', DEFAULTS.sampler.cutoff)),
      temperature: num('sampler.temperature', DEFAULTS.sampler.temperature),
    },
    minConfidence: Math.min(1, num('minConfidence', DEFAULTS.minConfidence)),
    repositoryContext: get('repositoryContext') !== false,
    languages: strings('languages').map((id) => id.trim()).filter((id) => id !== ''),
    completionMenu: get('completionMenu') === true,
    nextEdit: {
      enabled: get('nextEdit.enabled') !== false,
      debounceMs: Math.round(Math.min(MAX_DEBOUNCE_MS, num('nextEdit.debounceMs', DEFAULTS.nextEdit.debounceMs))),
    },
  };
}

function engineOf(value: string): string {
  return (ENGINES as readonly string[]).includes(value) || isEngineUrl(value) ? value : DEFAULTS.engine;
}

/** `~/x` → `$HOME/x`; anything else unchanged. */
export function expandHome(p: string, home: string = os.homedir()): string {
  if (p === '~') {
    return home;
  }
  if (p.startsWith('~/')) {
    return path.join(home, p.slice(2));
  }
  return p;
}

/** The settings object the server reads (every key present, so a cleared setting resets it). */
export function serverSettings(config: ExtensionConfig, home: string = os.homedir()): ServerSettings {
  return {
    model: config.model === '' ? null : expandHome(config.model, home),
    device: config.device,
    engine: config.engine,
    engineTokenFile: config.engineTokenFile === '' ? null : expandHome(config.engineTokenFile, home),
    sampler: { ...config.sampler },
    minConfidence: config.minConfidence,
    repositoryContext: config.repositoryContext,
    languages: config.languages.length === 0 ? null : [...config.languages],
  };
}

/** The executable and arguments that start the server on stdio. */
export function serverCommand(
  config: ExtensionConfig,
  home: string = os.homedir(),
): { command: string; args: string[] } {
  return { command: expandHome(config.path, home), args: ['serve', ...config.serverArgs] };
}

/** A change of these needs a new server process; every other setting is sent to the running one. */
export function needsRestart(before: ExtensionConfig, after: ExtensionConfig): boolean {
  return (
    before.path !== after.path ||
    before.serverArgs.length !== after.serverArgs.length ||
    before.serverArgs.some((arg, i) => arg !== after.serverArgs[i])
  );
}
