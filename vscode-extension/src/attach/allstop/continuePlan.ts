import { RankEntry } from '../../registry/registryModel';

/**
 * Continue All Ranks when the ranks continue each other (the harness's `rtdebug.rank.allstop`), as a pure
 * decision: which stopped rank gets the one `continue`, and which ranks this window continues itself. Runs in
 * the extension host; no VS Code types, so the unit tests drive it with entries as `ps --json` gives them.
 *
 * What the ranks do (allstop.py): a `continue` request reaches `AllStop.on_dap` in the rank; if that rank took
 * part in the all-stop (`in_episode`: its own breakpoint/exception/step/`rtdebug.breakpoint()` stop, which set
 * the board `stopped`, or a pause by all-stop) and the board still says stopped, it sets the board `running`.
 * Every other rank with a client then resumes itself in its watcher (`_watch`) if the job's `continue_all` is on
 * and it is not running, whatever stopped it (all-stop's pause, a user's Pause, a `--stop-on` or one-shot
 * stop), unless that stop came after the continue (`stop_gen`); a rank held with no client is let go. A
 * continue in a rank that took no part (its stop was a Pause, a `--stop-on` stop, or the one-shot stop at the
 * next collective, none of which set the board: "What does not pause the others" in docs/all-stop.md) sets
 * nothing, and nobody else moves.
 *
 * So, the rule, for the attached ranks this window has stopped (a Continue is due):
 * - the job's entries do not say `all_stop: true` and `continue_all: true` (one rank's entry saying it is
 *   enough: the extension sets the job's all-stop through one rank, whose entry alone is rewritten), or a rank is
 *   kept stopped (`except`): this window continues each rank itself (`own`), as with plain debugpy;
 * - else `first` is a rank whose entry says `stopped` with a reason other than `pause`, no `--stop-on` stop (its
 *   `stop` field) and not the one-shot stop this window armed (`quiet`): a stop that set the board. The rank
 *   another entry names as `by` (whose stop pauses it) is preferred: that stop is surely the board's. Failing
 *   one, a rank whose entry says `paused` (by all-stop): its continue sets the board `running` as well. Every
 *   other stopped rank is left to the ranks (`byRanks`): its watcher resumes it. Sending it a `continue` too is
 *   the race this avoids: resumed by its peer first, a rank that reaches a breakpoint again within those
 *   milliseconds would be continued past it;
 * - no such rank (every stop is a Pause, a `--stop-on` or one-shot stop): nothing sets the board, and this window
 *   continues each rank itself (`own`).
 * A rank of `byRanks` the ranks did not resume after all (the entries were stale, or the job's setting changed
 * under them) is continued by the caller once it has waited for it, and only while it is still at the stop it was
 * at (allStop.ts): never a stop that came after.
 */
export interface EntryDebug {
  /** `debug.state` of the rank's entry: running, stopped, paused, pausing. */
  state?: string;
  /** `debug.reason`: the DAP stop reason (`breakpoint`, `step`, `pause`...), `all-stop` when paused by it. */
  reason?: string;
  /** `debug.by`: the rank whose stop paused this one. */
  by?: number;
  /** The entry's `stop` is set: `--stop-on` holds the rank. */
  stopOn?: boolean;
}

/** What the job's rank entries say, read fresh when Continue All runs. */
export interface JobEntries {
  /** Some entry says `all_stop: true`. */
  allStop: boolean;
  /** Some entry says `continue_all: true` (older harnesses do not say it: false). */
  continueAll: boolean;
  /** Each rank's debug state, by rank (every rank of the job, attached here or not). */
  ranks: Map<number, EntryDebug>;
}

export interface StoppedRank {
  rank: number;
  /** Its stop is the one-shot stop at the next collective that this window armed (it set nothing). */
  quiet?: boolean;
}

export interface ContinuePlan {
  /** The one rank sent a `continue` first; its continue continues the others. */
  first?: number;
  /** Ranks this window continues itself (all of them when there is no `first`). */
  own: number[];
  /** Ranks the ranks resume on `first`'s continue (not sent a `continue` unless they stay at their stop). */
  byRanks: number[];
  /** Why, for the output channel. */
  why: string;
}

const str = (v: unknown): string | undefined => (typeof v === 'string' ? v : undefined);

/** One rank entry's debug state, read defensively (the entry is the rank's to write). */
export function entryDebug(e: Pick<RankEntry, 'debug' | 'stop'>): EntryDebug {
  const d: Record<string, unknown> = typeof e.debug === 'object' && e.debug !== null ? (e.debug as Record<string, unknown>) : {};
  const by = d.by;
  return {
    state: str(d.state),
    reason: str(d.reason),
    by: typeof by === 'number' && Number.isSafeInteger(by) ? by : undefined,
    stopOn: e.stop !== undefined && e.stop !== null,
  };
}

/** The job's entries as the plan reads them. */
export function jobEntries(ranks: Pick<RankEntry, 'rank' | 'debug' | 'stop' | 'all_stop' | 'continue_all'>[]): JobEntries {
  return {
    allStop: ranks.some((r) => r.all_stop === true),
    continueAll: ranks.some((r) => r.continue_all === true),
    ranks: new Map(ranks.map((r) => [r.rank, entryDebug(r)])),
  };
}

export function continuePlan(stopped: StoppedRank[], job: JobEntries | undefined, except?: number): ContinuePlan {
  const ranks = stopped.filter((s) => s.rank !== except).sort((a, b) => a.rank - b.rank);
  const all = ranks.map((s) => s.rank);
  const alone = (why: string): ContinuePlan => ({ own: all, byRanks: [], why });
  if (!ranks.length) return alone('no stopped rank');
  if (!job) return alone('no entries for the job: each rank is continued here');
  if (!job.allStop || !job.continueAll)
    return alone(`the job's ${job.allStop ? 'continue-all' : 'all-stop'} is off: each rank is continued here`);
  if (except !== undefined) return alone(`rank ${except} stays stopped: each other rank is continued here`);
  const named = new Set([...job.ranks.values()].filter((d) => d.state === 'paused' || d.state === 'pausing').map((d) => d.by));
  const setBoard = ranks.filter((s) => {
    const d = job.ranks.get(s.rank);
    return d?.state === 'stopped' && d.reason !== undefined && d.reason !== 'pause' && !d.stopOn && !s.quiet;
  });
  const paused = ranks.filter((s) => job.ranks.get(s.rank)?.state === 'paused');
  const first = setBoard.find((s) => named.has(s.rank)) ?? setBoard[0] ?? paused[0];
  if (!first) return alone("no stop here set the ranks' all-stop (pauses, --stop-on or one-shot stops): each rank is continued here");
  const d = job.ranks.get(first.rank)!;
  const why =
    d.state === 'paused'
      ? `rank ${first.rank} (paused by all-stop) is continued, the ranks continue the others`
      : `rank ${first.rank} (stopped: ${d.reason}) is continued, the ranks continue the others`;
  return { first: first.rank, own: [], byRanks: all.filter((r) => r !== first.rank), why };
}
