/**
 * The status bar item's text for each state of the engine behind the server. The server
 * sends `dg-lsp/engineState` {state: "loading" | "ready" | "unavailable", message}; the
 * extension adds "starting" (the server process starting), "running" (started; the model loads
 * with the first completion, which the server then reports) and "stopped" (server exited).
 * No `vscode` import, so the unit tests run under plain node.
 */

export const ENGINE_STATE_NOTIFICATION = 'dg-lsp/engineState';

export interface EngineStateParams {
  state: string;
  message: string;
}

export interface StatusView {
  /** Status bar text; `$(name)` is a codicon. */
  text: string;
  tooltip: string;
  /** Show on a warning background. */
  warning: boolean;
}

const CLICK = 'Click for the dg-lsp output.';

export function statusView(state: string, message: string = ''): StatusView {
  const detail = message ? `${message}\n${CLICK}` : CLICK;
  switch (state) {
    case 'starting':
      return { text: '$(loading~spin) dg-lsp', tooltip: `dg-lsp: starting the server\n${CLICK}`, warning: false };
    case 'running':
      return {
        text: '$(circle-outline) dg-lsp',
        tooltip: `dg-lsp: the server is running; the model loads with the first completion\n${CLICK}`,
        warning: false,
      };
    case 'loading':
      return { text: '$(loading~spin) dg-lsp: loading', tooltip: `dg-lsp: ${detail}`, warning: false };
    case 'ready':
      return { text: '$(check) dg-lsp', tooltip: `dg-lsp ready: ${detail}`, warning: false };
    case 'unavailable':
      return { text: '$(warning) dg-lsp: unavailable', tooltip: `dg-lsp: ${detail}`, warning: true };
    case 'stopped':
      return { text: '$(circle-slash) dg-lsp: stopped', tooltip: `dg-lsp: the server is not running\n${detail}`, warning: true };
    default:
      return { text: `$(question) dg-lsp: ${state}`, tooltip: `dg-lsp: ${detail}`, warning: false };
  }
}

/** The notification's params, or undefined when they are not of the documented shape. */
export function parseEngineState(params: unknown): EngineStateParams | undefined {
  if (typeof params !== 'object' || params === null) {
    return undefined;
  }
  const { state, message } = params as Record<string, unknown>;
  if (typeof state !== 'string') {
    return undefined;
  }
  return { state, message: typeof message === 'string' ? message : '' };
}
