/**
 * The status bar item's text for each state of the engine behind the server. The server
 * sends `dg-lsp/engineState` {state: "loading" | "ready" | "unavailable", message}; the
 * extension adds "starting" (the server process starting), "running" (started; the model loads
 * with the first completion, which the server then reports) and "stopped" (server exited).
 * After each inline completion it answered, the server also sends `dg-lsp/suggestion`: a
 * suggestion the confidence gate hid, or one shown below the gate because the user asked for
 * it, takes the status bar until the next one (suggestionView).
 * No `vscode` import, so the unit tests run under plain node.
 */

export const ENGINE_STATE_NOTIFICATION = 'dg-lsp/engineState';
export const SUGGESTION_NOTIFICATION = 'dg-lsp/suggestion';
/** VS Code's "Trigger Inline Suggestion" (Alt+\ by default): a request of triggerKind Invoked. */
export const TRIGGER_INLINE_SUGGESTION = 'editor.action.inlineSuggest.trigger';

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
  /** The command a click runs; undefined: show the output. */
  command?: string;
}

/** `dg-lsp/suggestion`: what the server did with one inline completion request. */
export interface SuggestionParams {
  uri: string;
  position: { line: number; character: number };
  /** The user asked (triggerKind Invoked), rather than typing. */
  asked: boolean;
  /** The answer holds an item. */
  shown: boolean;
  /** Shown only because it was asked for: the gate would have hidden it. */
  belowGate: boolean;
  /** The gate's probability that the suggestion is close to right; null: no score. */
  confidence: number | null;
  /** Why nothing was shown ("unsure (0.12)", "nothing usable"); "" when shown. */
  reason: string;
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

/** The notification's params, or undefined when they are not of the documented shape. */
export function parseSuggestion(params: unknown): SuggestionParams | undefined {
  if (typeof params !== 'object' || params === null) {
    return undefined;
  }
  const { uri, position, asked, shown, belowGate, confidence, reason } = params as Record<string, unknown>;
  const { line, character } = (typeof position === 'object' && position !== null ? position : {}) as Record<string, unknown>;
  if (typeof uri !== 'string' || typeof line !== 'number' || typeof character !== 'number'
      || typeof asked !== 'boolean' || typeof shown !== 'boolean') {
    return undefined;
  }
  return {
    uri,
    position: { line, character },
    asked,
    shown,
    belowGate: belowGate === true,
    confidence: typeof confidence === 'number' && Number.isFinite(confidence) ? confidence : null,
    reason: typeof reason === 'string' ? reason : '',
  };
}

/**
 * The status bar for a suggestion: why one was not shown, or that one was shown below the
 * gate because it was asked for; undefined where the engine's state view belongs (a
 * suggestion shown as usual).
 */
export function suggestionView(s: SuggestionParams): StatusView | undefined {
  if (s.shown) {
    if (!s.belowGate || s.confidence === null) {
      return undefined;
    }
    const confidence = s.confidence.toFixed(2);
    return {
      text: `$(eye) dg-lsp: ${confidence} (asked)`,
      tooltip: `dg-lsp: shown because you asked for it; the confidence gate would have hidden it `
        + `(${confidence} that it is close to right, below dg-lsp.minConfidence)\n${CLICK}`,
      warning: false,
    };
  }
  if (s.reason === '') {
    return undefined;
  }
  // A score means the model wrote something the gate hid: asking shows it. Without one there
  // was nothing to show, and asking again writes the same.
  if (!s.asked && s.confidence !== null) {
    return {
      text: `$(eye-closed) dg-lsp: ${s.reason}`,
      tooltip: `dg-lsp hid a suggestion here: ${s.reason}.\n`
        + 'Trigger Inline Suggestion (Alt+\\) shows it anyway; so does a click here.',
      warning: false,
      command: TRIGGER_INLINE_SUGGESTION,
    };
  }
  return {
    text: `$(eye-closed) dg-lsp: ${s.reason}`,
    tooltip: `dg-lsp: no suggestion here: ${s.reason}\n${CLICK}`,
    warning: false,
  };
}
