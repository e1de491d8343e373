/**
 * The server command `dg-lsp.rewriteWithInstruction` and its arguments:
 * `[{textDocument: {uri, version}, range, instruction, strength?}]`. The server's code action
 * "Rewrite selection with instruction…" carries the command without `instruction`; the editor
 * asks the user for one and adds it before the command reaches the server.
 * No `vscode` import, so the unit tests run under plain node.
 */

export const REWRITE_COMMAND = 'dg-lsp.rewriteWithInstruction';

export interface Position {
  line: number;
  character: number;
}

export interface Range {
  start: Position;
  end: Position;
}

export interface RewriteArgs {
  textDocument: { uri: string; version: number };
  range: Range;
  instruction?: string;
  strength?: number;
}

export function rewriteArgs(
  uri: string,
  version: number,
  range: Range,
  instruction?: string,
  strength?: number,
): RewriteArgs {
  const args: RewriteArgs = {
    textDocument: { uri, version },
    range: { start: { ...range.start }, end: { ...range.end } },
  };
  if (instruction !== undefined) {
    args.instruction = instruction;
  }
  if (strength !== undefined) {
    args.strength = strength;
  }
  return args;
}

/** True for the rewrite command when its first argument has no instruction yet. */
export function missingInstruction(command: string, args: readonly unknown[]): boolean {
  if (command !== REWRITE_COMMAND || args.length === 0) {
    return false;
  }
  const first = args[0];
  if (typeof first !== 'object' || first === null) {
    return false;
  }
  const instruction = (first as Record<string, unknown>).instruction;
  return typeof instruction !== 'string' || instruction.trim() === '';
}

/** A copy of `args` whose first argument carries `instruction` (the rest untouched). */
export function withInstruction(args: readonly unknown[], instruction: string): unknown[] {
  const [first, ...rest] = args;
  return [{ ...(first as object), instruction }, ...rest];
}

/** The input box's validation: a message for an unusable instruction, undefined when fine. */
export function checkInstruction(text: string): string | undefined {
  return text.trim() === '' ? 'Say what to do with the selection, e.g. "add type hints"' : undefined;
}
