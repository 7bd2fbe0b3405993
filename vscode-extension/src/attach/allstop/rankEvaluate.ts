import { ranksWord } from '../../common/rankList';
import { AllStop } from './allStop';
import { RankDebugInfo, RankDebugStates, RankKey } from './rankDebugState';

/**
 * One expression evaluated in every rank of a job at one moment (Stop All Ranks When…): DAP `evaluate`
 * needs a frame, so the running ranks are paused (through AllStop.pauseBrief: those stops pause nobody
 * else and are not taken for the user's), each is evaluated in the top frame of its stopped thread, and the
 * ones paused for it are continued together; a rank the user had stopped stays stopped.
 *
 * Why all at once and not one rank after another: what is evaluated may change what the rank does at its
 * next collective (armed --stop-on joins one vote per step), so a rank that runs on changed while a peer
 * is unchanged can leave them in different collectives for good. And a pause lands only in Python: a rank
 * that waits inside a collective for a peer already paused never stops. So when some ranks have not
 * stopped after `landMs`, all are let go (the collective completes; a pause that lands later is resumed at
 * once) and paused again, up to `attempts` times; nothing is evaluated unless every rank stopped. Waits are
 * on the ranks' states (RankDebugStates events), bounded. No VS Code types: unit and DAP tests drive it.
 */
export interface EvalDeps {
  /** A DAP request to the rank's debug session (customRequest). */
  request(k: RankKey, command: string, args: Record<string, unknown>): Promise<unknown>;
}

export interface EvalResult {
  value?: string;
  error?: string;
}

export interface HoldOptions {
  /** How long the pauses get to land, per attempt. */
  landMs: number;
  attempts: number;
  /** How long a rank that is pausing, stepping or continuing gets to settle (running or stopped). */
  settleMs: number;
}
export const HOLD: HoldOptions = { landMs: 2500, attempts: 5, settleMs: 15000 };

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

const stopped = (i: RankDebugInfo | undefined) => i?.state === 'stopped';

export type HoldResult = { ok: true; results: Map<number, EvalResult> } | { ok: false; error: string };

/** `expression` in every rank of `keys`, all stopped at one moment; nothing is evaluated unless all stop. */
export async function evaluateInAll(
  states: RankDebugStates,
  allStop: AllStop,
  deps: EvalDeps,
  keys: RankKey[],
  expression: string,
  opts: HoldOptions = HOLD,
): Promise<HoldResult> {
  // running (an attached rank with no state yet has never stopped: it runs), or stopped and not for us
  const settled = (k: RankKey) => (i: RankDebugInfo | undefined) =>
    !i || i.state === 'running' || (i.state === 'stopped' && !allStop.isBrief(k));
  const settle = async (): Promise<RankKey | undefined> => {
    const s = await Promise.all(keys.map((k) => untilState(states, k, settled(k), opts.settleMs)));
    return keys.find((_, i) => s[i] === 'timeout');
  };
  // continue the ranks paused here (a pause still pending is resumed when it lands)
  const release = (ks: RankKey[]) =>
    Promise.all(ks.map((k) => (stopped(states.get(k)) ? allStop.resumeBrief(k) : Promise.resolve(allStop.abandonBrief(k)))));
  const busy = await settle();
  if (busy) return { ok: false, error: `rank ${busy.rank} is still ${states.get(busy)?.state} after ${opts.settleMs / 1000} s` };
  for (let attempt = 1; ; attempt++) {
    const paused = keys.filter((k) => !stopped(states.get(k)) && allStop.pauseBrief(k));
    const landed = await Promise.all(keys.map((k) => untilState(states, k, stopped, opts.landMs)));
    const stuck = keys.filter((_, i) => landed[i] === 'timeout');
    if (!stuck.length) {
      try {
        const results = await Promise.all(
          keys.map(async (k) => [k.rank, await evaluateTop(deps, k, states.get(k)?.threadId, expression)] as const),
        );
        return { ok: true, results: new Map(results) };
      } finally {
        await release(paused);
      }
    }
    await release(paused);
    if (attempt >= opts.attempts)
      return {
        ok: false,
        error: `${ranksWord(stuck.map((k) => k.rank))} did not stop with the others in ${attempt} tries (in C code: waiting in a collective for a rank already stopped?)`,
      };
    const still = await settle();
    if (still) return { ok: false, error: `rank ${still.rank} is still ${states.get(still)?.state} after ${opts.settleMs / 1000} s` };
  }
}

/** `expression` in the top frame of the rank's stopped thread. */
export async function evaluateTop(deps: EvalDeps, k: RankKey, threadId: number | undefined, expression: string): Promise<EvalResult> {
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
