import * as vscode from 'vscode';

/** How long VS Code gets to focus the origin by itself (its `stopped` event has preserveFocusHint false). */
export const NATIVE_FOCUS_MS = 2000;

const isIn = (s: vscode.DebugSession) => vscode.debug.activeStackItem?.session.id === s.id;

/**
 * Focus one rank's debug session (its stopped thread's top frame: Call Stack, editor, toolbar, Debug
 * Console). VS Code focuses a session whose `stopped` event has preserveFocusHint false only when no other
 * session's frame is focused, so first it gets NATIVE_FOCUS_MS to do that (waiting on its focus change);
 * if another session's frame keeps the focus, the session is focused explicitly. The extension API has no
 * call for that (activeDebugSession is read-only; `workbench.action.debug.focusProcess` takes the
 * workbench's own session object, which an extension cannot pass), so the Debug Console's session picker
 * does it — the quick access `debug consoles <name>`, accepted — which focuses the session as a click in
 * the Call Stack does (and shows the Debug Console). The session's name is made unique while it is picked
 * (the picker matches names fuzzily: "rank 1 (S)" would also match "rank 10 (S)").
 */
export async function focusRankSession(s: vscode.DebugSession, log: (line: string) => void): Promise<void> {
  await focusIn(s, NATIVE_FOCUS_MS);
  if (isIn(s)) return;
  const name = s.name;
  const unique = `${name} \u2990${Math.random().toString(36).slice(2, 8)}`;
  try {
    s.name = unique;
    await vscode.commands.executeCommand('workbench.action.quickOpen', `debug consoles ${unique}`);
    await vscode.commands.executeCommand('workbench.action.acceptSelectedQuickOpenItem');
  } catch (e) {
    log(`rtdebug: could not focus ${name}: ${(e as Error).message}`);
  } finally {
    s.name = name;
  }
  await focusIn(s, NATIVE_FOCUS_MS);
  log(isIn(s) ? `rtdebug: --stop-on: focused ${name} (where it began)` : `rtdebug: --stop-on: could not focus ${name} (where it began)`);
}

/** Resolves once the session's frame has the focus, or after `ms`. */
function focusIn(s: vscode.DebugSession, ms: number): Promise<void> {
  if (isIn(s)) return Promise.resolve();
  return new Promise<void>((resolve) => {
    const timer = setTimeout(done, ms);
    const sub = vscode.debug.onDidChangeActiveStackItem(() => {
      if (isIn(s)) done();
    });
    function done() {
      clearTimeout(timer);
      sub.dispose();
      resolve();
    }
  });
}
