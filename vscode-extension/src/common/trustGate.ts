/**
 * The trust rule (VS Code's Workspace Trust, as the extension applies it): in an untrusted workspace the
 * extension runs no Python at all — no rtdebug CLI call, no job. It still reads this machine's registry
 * files, so the Ranks view keeps listing local sessions. Pure, so the decision is unit-tested;
 * workspaceTrust.ts feeds it `vscode.workspace.isTrusted`.
 */
export class UntrustedWorkspaceError extends Error {}

/** The one message every gated command shows; `what` names the action ("Stop Session"). */
export function untrustedMessage(what: string): string {
  return (
    `${what} runs Python (the rtdebug CLI), which rtdebug does only in a trusted workspace. ` +
    "Trust this folder (Workspaces: Manage Workspace Trust) to use it; the Ranks view still lists this machine's sessions."
  );
}

/** undefined when `what` may run, else the message saying why not. */
export function trustGate(trusted: boolean, what: string): string | undefined {
  return trusted ? undefined : untrustedMessage(what);
}

/** Throws UntrustedWorkspaceError unless trusted (for code paths that report errors by throwing). */
export function checkTrusted(trusted: boolean, what: string): void {
  const msg = trustGate(trusted, what);
  if (msg) throw new UntrustedWorkspaceError(msg);
}
