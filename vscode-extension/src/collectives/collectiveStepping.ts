import { AllStop } from '../attach/allstop/allStop';
import { Collective } from '../registry/collectiveRecord';
import { RankDebugInfo, RankDebugStates, RankKey } from '../attach/allstop/rankDebugState';

/**
 * Stepping that knows about collectives (issue 21), without VS Code types so the DAP tests drive it against
 * real ranks: Step All Ranks (DAP `next` on the stopped thread of every stopped rank at once, so a collective
 * on that line completes), Run All Ranks to Next Collective (arm contract C1's one-shot stop in every stopped
 * rank, then continue them all), and the stuck-step rule: with all-stop on, a step in one rank that has not
 * returned while its peers are stopped waits in a collective for them, so they are stepped too.
 */
export const STOP_AT_NEXT_EXPR = "__import__('rtdebug.rank.api', fromlist=['_']).stop_at_next_collective()";
/** A step still running after this long, with peers stopped, is taken as waiting for them. */
export const STEP_STUCK_MS = 1500;
/** Peers are stepped at most this many times for one stuck step (they may never reach the collective). */
export const MAX_AUTO_STEPS = 20;

export interface SteppingDeps {
  attached(session: string): RankKey[];
  /** A DAP request to the rank's debug session (customRequest). */
  request(k: RankKey, command: string, args: Record<string, unknown>): Promise<unknown>;
  /** The rank's last collective (ps --json), if known. */
  collective(k: RankKey): Collective | null | undefined;
  allStopOn(): boolean;
  /** Tell the user why peers were stepped (status bar; `first`: first time in this window). */
  notify(message: string, first: boolean): void;
  log(line: string): void;
}

export interface RankState {
  rank: number;
  info?: RankDebugInfo;
  collective?: Collective | null;
}
export interface StuckDecision {
  stuck: number;
  peers: number[];
  message: string;
}

/**
 * The stuck-step decision for one session, pure: the first rank whose step has run `stuckAfterMs` since it
 * started (or since peers were last stepped for it), or whose record shows it entered a collective during the
 * step, while at least one peer is stopped with a known thread → step those peers.
 */
export function stuckStep(ranks: RankState[], nowMs: number, lastAutoStepMs = 0, stuckAfterMs = STEP_STUCK_MS): StuckDecision | undefined {
  const peers = ranks.filter((r) => r.info?.state === 'stopped' && r.info.threadId !== undefined).map((r) => r.rank);
  if (!peers.length) return undefined;
  for (const r of ranks) {
    const i = r.info;
    if (i?.state !== 'stepping' || i.stepStartedAt === undefined) continue;
    const from = Math.max(i.stepStartedAt, lastAutoStepMs);
    const c = r.collective;
    const inColl = c?.state === 'entered' && c.since !== undefined && c.since * 1000 >= i.stepStartedAt - 1000;
    if (nowMs - from < stuckAfterMs && !(inColl && nowMs - lastAutoStepMs >= stuckAfterMs / 3)) continue;
    const what = inColl
      ? `waits in ${c!.op} #${c!.seq}`
      : `has not returned after ${((nowMs - i.stepStartedAt) / 1000).toFixed(1)} s (a collective?)`;
    return {
      stuck: r.rank,
      peers,
      message: `rank ${r.rank}'s step ${what} while rank ${peers.join(', ')} ${peers.length === 1 ? 'is' : 'are'} stopped (all-stop): stepping ${peers.length === 1 ? 'it' : 'them'} too so the collective completes`,
    };
  }
  return undefined;
}

export interface ArmResult {
  armed: number[];
  failed: { rank: number; error: string }[];
  continued: number[];
}

export class CollectiveStepping {
  private lastAuto = new Map<string, number>();
  private autoSteps = new Map<string, number>();
  private told = false;

  constructor(
    private states: RankDebugStates,
    private allStop: AllStop,
    private deps: SteppingDeps,
    private now = () => Date.now(),
  ) {}

  private stoppedRanks(session: string): RankKey[] {
    return this.deps
      .attached(session)
      .filter((k) => this.states.get(k)?.state === 'stopped' && this.states.get(k)?.threadId !== undefined)
      .sort((a, b) => a.rank - b.rank);
  }

  /** DAP `next` on every stopped rank of the session together; returns the ranks stepped. */
  async stepAll(session: string, ranks = this.stoppedRanks(session)): Promise<number[]> {
    const sent = ranks.map(async (k) => {
      const threadId = this.states.get(k)?.threadId;
      this.allStop.stepping(k);
      try {
        await this.deps.request(k, 'next', { threadId });
        return k.rank;
      } catch (e) {
        this.deps.log(`rtdebug: step rank ${k.rank} failed: ${(e as Error).message}`);
        return undefined;
      }
    });
    return (await Promise.all(sent)).filter((r): r is number => r !== undefined);
  }

  /** Arm the one-shot stop at the next collective in every stopped rank; when all armed, continue them all. */
  async runToNextCollective(session: string): Promise<ArmResult> {
    const ranks = this.stoppedRanks(session);
    const out: ArmResult = { armed: [], failed: [], continued: [] };
    await Promise.all(
      ranks.map(async (k) => {
        try {
          await this.arm(k);
          out.armed.push(k.rank);
        } catch (e) {
          out.failed.push({ rank: k.rank, error: (e as Error).message.split('\n')[0].slice(0, 200) });
        }
      }),
    );
    out.armed.sort((a, b) => a - b);
    // a rank left unarmed would run past its collective: nothing is continued then
    if (!out.failed.length && out.armed.length) out.continued = this.allStop.runToCollective(session);
    return out;
  }

  private async arm(k: RankKey): Promise<void> {
    const threadId = this.states.get(k)?.threadId;
    const st = (await this.deps.request(k, 'stackTrace', { threadId, startFrame: 0, levels: 1 })) as { stackFrames?: { id: number }[] };
    const frame = st?.stackFrames?.[0];
    if (!frame) throw new Error('no frame');
    await this.deps.request(k, 'evaluate', { expression: STOP_AT_NEXT_EXPR, frameId: frame.id, context: 'repl' });
  }

  /** The timer tick: in every session with all-stop on, apply the stuck-step rule. */
  check(): void {
    if (!this.deps.allStopOn()) return;
    for (const session of new Set(this.states.keys().map((k) => k.session))) {
      const keys = this.deps.attached(session);
      const stepping = keys.some((k) => this.states.get(k)?.state === 'stepping');
      if (!stepping) {
        this.autoSteps.delete(session);
        this.lastAuto.delete(session);
        continue;
      }
      const d = stuckStep(
        keys.map((k) => ({ rank: k.rank, info: this.states.get(k), collective: this.deps.collective(k) })),
        this.now(),
        this.lastAuto.get(session),
      );
      if (!d) continue;
      const n = (this.autoSteps.get(session) ?? 0) + 1;
      if (n > MAX_AUTO_STEPS) continue;
      this.autoSteps.set(session, n);
      this.lastAuto.set(session, this.now());
      this.deps.log(`rtdebug: ${d.message}`);
      if (n === 1) {
        this.deps.notify(d.message, !this.told);
        this.told = true;
      }
      if (n === MAX_AUTO_STEPS)
        this.deps.notify(
          `rank ${d.stuck}'s step still waits after its peers were stepped ${n} times: they do not reach the same collective. Run All Ranks to Next Collective or Show Stacks shows where each is.`,
          false,
        );
      void this.stepAll(
        session,
        keys.filter((k) => d.peers.includes(k.rank)),
      );
    }
  }
}
