import * as vscode from 'vscode';
import { checkTrusted, trustGate } from './trustGate';

/** Thin wrappers that feed `vscode.workspace.isTrusted` to the pure trust gate (trustGate.ts). */
export function workspaceTrusted(): boolean {
  return vscode.workspace.isTrusted;
}

/** Throws the untrusted-workspace error unless the workspace is trusted. */
export function requireTrust(what: string): void {
  checkTrusted(workspaceTrusted(), what);
}

/** For commands: true when trusted, else shows the one message and returns false. */
export function ensureTrusted(what: string): boolean {
  const msg = trustGate(workspaceTrusted(), what);
  if (msg) void vscode.window.showErrorMessage(`rtdebug: ${msg}`);
  return !msg;
}
