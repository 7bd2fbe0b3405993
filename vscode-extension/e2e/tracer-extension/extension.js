// Test-only extension for the rtdebug real-VS-Code e2e. On startup it sets the breakpoint named by
// RTDEBUG_E2E_BREAKPOINT ("file:line"); a debug adapter tracker on every session appends what it saw to the
// JSON-lines file RTDEBUG_E2E_TRACE: session starts/ends and, for each stop, the top frame and the value of
// RTDEBUG_E2E_EVAL evaluated in it. "Remove Breakpoints and Continue All" lets the job finish.
const vscode = require('vscode');
const fs = require('fs');

const TRACE = process.env.RTDEBUG_E2E_TRACE;
const EVAL = process.env.RTDEBUG_E2E_EVAL || '1';
const stoppedThreads = new Map(); // session id -> { session, threadId }

function record(obj) {
  if (TRACE) fs.appendFileSync(TRACE, JSON.stringify({ t: Date.now(), ...obj }) + '\n');
}

function describe(session) {
  const c = session.configuration;
  return { id: session.id, name: session.name, type: session.type, request: c.request, rank: c.rtdebugRank ? c.rtdebugRank.rank : null,
    parent: session.parentSession ? session.parentSession.name : null };
}

exports.activate = (context) => {
  const bp = process.env.RTDEBUG_E2E_BREAKPOINT;
  if (bp) {
    const i = bp.lastIndexOf(':');
    const uri = vscode.Uri.file(bp.slice(0, i));
    vscode.debug.addBreakpoints([new vscode.SourceBreakpoint(new vscode.Location(uri, new vscode.Position(Number(bp.slice(i + 1)) - 1, 0)))]);
    record({ kind: 'breakpoint-set', file: uri.fsPath, line: Number(bp.slice(i + 1)) });
  }
  context.subscriptions.push(
    vscode.debug.onDidStartDebugSession((s) => record({ kind: 'session-start', ...describe(s) })),
    vscode.debug.onDidTerminateDebugSession((s) => record({ kind: 'session-end', ...describe(s) })),
    vscode.debug.registerDebugAdapterTrackerFactory('*', {
      createDebugAdapterTracker: (session) => ({
        onDidSendMessage: async (m) => {
          if (m.type !== 'event' || m.event !== 'stopped') return;
          try {
            const threadId = m.body.threadId;
            stoppedThreads.set(session.id, { session, threadId });
            const st = await session.customRequest('stackTrace', { threadId, startFrame: 0, levels: 1 });
            const top = st.stackFrames[0];
            const ev = await session.customRequest('evaluate', { expression: EVAL, frameId: top.id, context: 'repl' });
            record({ kind: 'stopped', ...describe(session), reason: m.body.reason, line: top.line, source: top.source && (top.source.path || top.source.name), eval: ev.result });
          } catch (e) {
            record({ kind: 'stopped-error', ...describe(session), error: String(e && e.message) });
          }
        },
        onError: (e) => record({ kind: 'adapter-error', ...describe(session), error: String(e && e.message) }),
      }),
    }),
    vscode.commands.registerCommand('rtdebugE2e.continueAll', async () => {
      vscode.debug.removeBreakpoints(vscode.debug.breakpoints);
      await new Promise((r) => setTimeout(r, 500));
      for (const { session, threadId } of stoppedThreads.values()) {
        try { await session.customRequest('continue', { threadId }); } catch (e) { record({ kind: 'continue-error', error: String(e && e.message) }); }
      }
      record({ kind: 'continued', sessions: stoppedThreads.size });
      stoppedThreads.clear();
    }),
  );
};
exports.deactivate = () => {};
