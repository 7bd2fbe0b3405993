import * as fs from 'fs';
import * as path from 'path';
import { DebugClient } from '@vscode/debugadapter-testsupport';
import { DebugProtocol } from '@vscode/debugprotocol';

/** Line of the `# BREAKPOINT: <tag>` marker in an example script (1-based). */
export function markerLine(file: string, tag: string): number {
  const i = fs
    .readFileSync(file, 'utf8')
    .split('\n')
    .findIndex((l) => l.includes(`# BREAKPOINT: ${tag}`));
  if (i < 0) throw new Error(`no "# BREAKPOINT: ${tag}" in ${file}`);
  return i + 1;
}

/** What VS Code does to ${workspaceFolder} before it sends the attach request. */
export function substitute<T>(v: T, workspaceFolder: string): T {
  return JSON.parse(JSON.stringify(v).split('${workspaceFolder}').join(workspaceFolder.replace(/\\/g, '\\\\')));
}

export function freePortBase(): number {
  return 20000 + ((Math.floor(Math.random() * 20000) * 2) % 30000);
}

/**
 * The attach handshake VS Code performs against debugpy: initialize → attach (answered only after
 * configurationDone) → initialized → setBreakpoints → configurationDone. Returns the breakpoint response.
 */
export async function attachWithBreakpoint(
  dc: DebugClient,
  port: number,
  args: Record<string, unknown>,
  file: string,
  line: number,
): Promise<DebugProtocol.SetBreakpointsResponse> {
  await dc.start(port);
  await dc.initializeRequest({
    adapterID: 'debugpy',
    clientID: 'rtdebug-dap-e2e',
    pathFormat: 'path',
    linesStartAt1: true,
    columnsStartAt1: true,
    supportsRunInTerminalRequest: false,
  });
  const attached = dc.attachRequest(args as DebugProtocol.AttachRequestArguments);
  await dc.waitForEvent('initialized', 30000);
  const bps = await dc.setBreakpointsRequest({ source: { path: file }, breakpoints: [{ line }] });
  await dc.configurationDoneRequest();
  await attached;
  return bps;
}

export async function topFrame(dc: DebugClient, threadId: number): Promise<DebugProtocol.StackFrame> {
  const st = await dc.stackTraceRequest({ threadId, startFrame: 0, levels: 1 });
  return st.body.stackFrames[0];
}

export const examplesDir = (repo: string) => path.join(repo, 'examples');

/** `p`, or `fallback` after `ms` (the timer is cleared either way, so it never holds the event loop). */
export async function withTimeout<T, F>(p: Promise<T>, ms: number, fallback: F): Promise<T | F> {
  let timer: NodeJS.Timeout | undefined;
  try {
    return await Promise.race([
      p,
      new Promise<F>((r) => {
        timer = setTimeout(() => r(fallback), ms);
      }),
    ]);
  } finally {
    clearTimeout(timer);
  }
}
