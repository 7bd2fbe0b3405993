import { AllStop } from '../attach/allstop/allStop';
import { RankDebugStates, RankKey } from '../attach/allstop/rankDebugState';

/**
 * Stepping that knows about collectives (issue 21), without VS Code types so the DAP tests drive it against
 * real ranks: Step All Ranks (DAP `next` on the stopped thread of every stopped rank at once, so a collective
 * on that line completes) and Run All Ranks to Next Collective (arm contract C1's one-shot stop in every stopped
 * rank, then continue them all). A step in one rank over a collective needs no help from here: the ranks'
 * all-stop lets its held peers go for it and pauses them again at its stop (the harness's `rtdebug.rank.allstop`).
 */
export const STOP_AT_NEXT_EXPR = "__import__('rtdebug.rank.api', fromlist=['_']).stop_at_next_collective()";

export interface SteppingDeps {
  attached(session: string): RankKey[];
  /** A DAP request to the rank's debug session (customRequest). */
  request(k: RankKey, command: string, args: Record<string, unknown>): Promise<unknown>;
  log(line: string): void;
}

export interface ArmResult {
  armed: number[];
  failed: { rank: number; error: string }[];
  continued: number[];
}

export class CollectiveStepping {
  constructor(
    private states: RankDebugStates,
    private allStop: AllStop,
    private deps: SteppingDeps,
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
}
