import { AllStop } from './allStop';
import { RankDebugInfo, RankDebugStates, RankKey } from './rankDebugState';

/**
 * One expression evaluated in one attached rank whatever it is doing. DAP `evaluate` needs a frame, so a
 * running rank is paused (its main thread), evaluated in the top frame of the stopped thread, and continued
 * — through AllStop.pauseBrief, so that stop pauses no other rank and is not mistaken for the user's. A
 * stopped rank is evaluated where it is and stays stopped. A rank that is pausing, stepping or continuing
 * is waited for until it is running or stopped. Waits are on the rank's state (RankDebugStates events),
 * bounded by `timeoutMs`; a pause that has not landed by then (the rank is in C code: a collective, a long
 * kernel) is given up, and resumed at once should it land later. No VS Code types: the DAP tests and unit
 * tests drive it.
 */
export interface EvalDeps {
  /** A DAP request to the rank's debug session (customRequest). */
  request(k: RankKey, command: string, args: Record<string, unknown>): Promise<unknown>;
}

export interface EvalResult {
  value?: string;
  error?: string;
  /** True when the rank was paused for it (and continued after). */
  paused?: boolean;
}

/** How long a rank may take to stop for an evaluate (or to finish a step or a pending pause). */
export const BRIEF_PAUSE_MS = 15000;

/** Resolves with the rank's state once `ok` holds (now or on a later change), or 'timeout'. */
export function untilState(
  states: RankDebugStates,
  k: RankKey,
  ok: (i: RankDebugInfo | undefined) => boolean,
  timeoutMs: number,
): Promise<RankDebugInfo | undefined | 'timeout'> {
  return new Promise((resolve) => {
    if (ok(states.get(k))) return resolve(states.get(k));
    const timer = setTimeout(() => {
      sub.dispose();
      resolve('timeout');
    }, timeoutMs);
    const sub = states.onDidChange(() => {
      if (!ok(states.get(k))) return;
      clearTimeout(timer);
      sub.dispose();
      resolve(states.get(k));
    });
  });
}

const settled = (i: RankDebugInfo | undefined) => !i || i.state === 'running' || i.state === 'stopped';
const seconds = (ms: number) => `${Math.round(ms / 1000)} s`;

export async function evaluateInRank(
  states: RankDebugStates,
  allStop: AllStop,
  deps: EvalDeps,
  k: RankKey,
  expression: string,
  timeoutMs = BRIEF_PAUSE_MS,
): Promise<EvalResult> {
  const now = await untilState(states, k, settled, timeoutMs);
  if (now === 'timeout') return { error: `still ${states.get(k)?.state ?? 'busy'} after ${seconds(timeoutMs)}` };
  if (now?.state === 'stopped') return evalTop(deps, k, now.threadId, expression);
  if (!allStop.pauseBrief(k)) return { error: `not running or stopped (${states.get(k)?.state})` };
  const st = await untilState(states, k, (i) => i?.state === 'stopped' || i?.state === 'running', timeoutMs);
  if (st === 'timeout' || st?.state !== 'stopped') {
    allStop.abandonBrief(k);
    return { error: st === 'timeout' ? `did not stop within ${seconds(timeoutMs)} (in C code: a collective?)` : 'its pause failed' };
  }
  try {
    return { ...(await evalTop(deps, k, st.threadId, expression)), paused: true };
  } finally {
    await allStop.resumeBrief(k);
  }
}

async function evalTop(deps: EvalDeps, k: RankKey, threadId: number | undefined, expression: string): Promise<EvalResult> {
  if (threadId === undefined) return { error: 'no stopped thread' };
  try {
    const st = (await deps.request(k, 'stackTrace', { threadId, startFrame: 0, levels: 1 })) as { stackFrames?: { id: number }[] };
    const frame = st?.stackFrames?.[0];
    if (!frame) return { error: 'no frame' };
    const ev = (await deps.request(k, 'evaluate', { expression, frameId: frame.id, context: 'repl' })) as { result?: unknown };
    return { value: String(ev?.result ?? '') };
  } catch (e) {
    // a Python traceback's last line names the exception
    const lines = (e as Error).message.split('\n').filter((l) => l.trim());
    return { error: (lines[lines.length - 1] ?? 'evaluate failed').trim().slice(0, 200) };
  }
}
