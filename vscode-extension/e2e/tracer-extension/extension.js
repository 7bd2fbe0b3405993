// Test-only extension for the rtdebug real-VS-Code e2e. On startup it sets the breakpoints named by
// RTDEBUG_E2E_BREAKPOINTS ("file:line;file:line"); a debug adapter tracker on every session appends what it
// saw to the JSON-lines file RTDEBUG_E2E_TRACE: session starts/ends and, for each stop, the top frame and
// the value of the expression RTDEBUG_E2E_EVAL (JSON: script basename -> expression) gives for that file.
// Evaluate documents (rtdebug-eval:) are recorded as they open; `continued` events are recorded too, and which
// session has the focus (active debug session, active stack item) whenever that changes.
// "Stop rtdebug Parent Sessions" does what the Stop button on a parent session does (vscode.debug.stopDebugging).
const vscode = require('vscode');
const fs = require('fs');

const TRACE = process.env.RTDEBUG_E2E_TRACE;
const EVAL = JSON.parse(process.env.RTDEBUG_E2E_EVAL || '{}');
const exprFor = (source) => EVAL[String(source).split(/[\\/]/).pop()] || '1';
const sessionsSeen = new Map(); // session id -> live vscode.DebugSession

function record(obj) {
  if (TRACE) fs.appendFileSync(TRACE, JSON.stringify({ t: Date.now(), ...obj }) + '\n');
}

function describe(session) {
  const c = session.configuration;
  return {
    id: session.id,
    name: session.name,
    type: session.type,
    request: c.request,
    rank: c.rtdebugRank ? c.rtdebugRank.rank : null,
    parent: session.parentSession ? session.parentSession.name : null,
  };
}

exports.activate = (context) => {
  for (const bp of (process.env.RTDEBUG_E2E_BREAKPOINTS || '').split(';').filter(Boolean)) {
    const i = bp.lastIndexOf(':');
    const uri = vscode.Uri.file(bp.slice(0, i));
    vscode.debug.addBreakpoints([
      new vscode.SourceBreakpoint(new vscode.Location(uri, new vscode.Position(Number(bp.slice(i + 1)) - 1, 0))),
    ]);
    record({ kind: 'breakpoint-set', file: uri.fsPath, line: Number(bp.slice(i + 1)) });
  }
  context.subscriptions.push(
    vscode.debug.onDidStartDebugSession((s) => {
      sessionsSeen.set(s.id, s);
      record({ kind: 'session-start', ...describe(s) });
    }),
    vscode.debug.onDidTerminateDebugSession((s) => {
      sessionsSeen.delete(s.id);
      record({ kind: 'session-end', ...describe(s) });
    }),
    // which session has the focus (the --stop-on flow: the origin rank's)
    vscode.debug.onDidChangeActiveDebugSession((s) => record({ kind: 'active-session', ...(s ? describe(s) : { id: null }) })),
    vscode.debug.onDidChangeActiveStackItem((i) => record({ kind: 'active-stack-item', ...(i ? describe(i.session) : { id: null }) })),
    vscode.debug.registerDebugAdapterTrackerFactory('*', {
      createDebugAdapterTracker: (session) => ({
        onDidSendMessage: async (m) => {
          if (m.type === 'event' && m.event === 'continued')
            record({ kind: 'continued', ...describe(session), threadId: m.body && m.body.threadId });
          if (m.type !== 'event' || m.event !== 'stopped') return;
          try {
            const threadId = m.body.threadId;
            const st = await session.customRequest('stackTrace', { threadId, startFrame: 0, levels: 1 });
            const top = st.stackFrames[0];
            const source = top.source && (top.source.path || top.source.name);
            const ev = await session.customRequest('evaluate', { expression: exprFor(source), frameId: top.id, context: 'repl' });
            record({
              kind: 'stopped',
              ...describe(session),
              reason: m.body.reason,
              description: m.body.description,
              preserveFocusHint: m.body.preserveFocusHint,
              line: top.line,
              source,
              eval: ev.result,
            });
          } catch (e) {
            record({ kind: 'stopped-error', ...describe(session), error: String(e && e.message) });
          }
        },
        onError: (e) => record({ kind: 'adapter-error', ...describe(session), error: String(e && e.message) }),
      }),
    }),
    // The text of every "Evaluate in All Ranks" document (scheme rtdebug-eval) as it opens, for the checks.
    vscode.workspace.onDidOpenTextDocument((d) => {
      if (d.uri.scheme === 'rtdebug-eval') record({ kind: 'eval-doc', uri: d.uri.toString(), text: d.getText() });
    }),
    // What a user does in the Settings editor: rtdebug.allStop on/off in the user settings.
    vscode.commands.registerCommand('rtdebugE2e.allStopOn', async () => {
      await vscode.workspace.getConfiguration('rtdebug').update('allStop', true, vscode.ConfigurationTarget.Global);
      record({ kind: 'setting', allStop: vscode.workspace.getConfiguration('rtdebug').get('allStop') });
    }),
    vscode.commands.registerCommand('rtdebugE2e.allStopOff', async () => {
      await vscode.workspace.getConfiguration('rtdebug').update('allStop', false, vscode.ConfigurationTarget.Global);
      record({ kind: 'setting', allStop: vscode.workspace.getConfiguration('rtdebug').get('allStop') });
    }),
    vscode.commands.registerCommand('rtdebugE2e.removeBreakpoints', () => {
      vscode.debug.removeBreakpoints(vscode.debug.breakpoints);
      record({ kind: 'breakpoints-removed' });
    }),
    vscode.commands.registerCommand('rtdebugE2e.stopParents', async () => {
      const parents = [];
      for (const s of sessionsSeen.values()) if (s.type === 'rtdebug' && !s.parentSession && !s.configuration.rtdebugRank) parents.push(s);
      for (const s of parents) await vscode.debug.stopDebugging(s);
      record({ kind: 'stopped-parents', names: parents.map((s) => s.name) });
    }),
  );
};
exports.deactivate = () => {};
