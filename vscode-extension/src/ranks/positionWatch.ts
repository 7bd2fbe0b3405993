import { REGISTRY_POLL_MS } from '../common/constants';
import { Collective } from '../registry/collectiveRecord';

/**
 * Which ranks' collective positions are still moving, across the Ranks view's polls (issue 43 item 5). A
 * healthy job at hundreds of collectives a second shows, at any one poll, ranks one collective apart
 * (`rank 0 ALLREDUCE #812 · rank 1 ALLREDUCE #811`): that is not a hang. As `rtdebug stacks` gives a verdict
 * only to ranks that stand still, the view's hang badge (`collectives differ`, orange) needs every rank's
 * position unchanged for `STILL_MS` (two polls); a rank first seen, or whose position changed since, is
 * moving. Time, not a count of updates: one poll's data may be shown several times (a debugger event).
 */
export const STILL_MS = 2 * REGISTRY_POLL_MS;

export interface RankPosition {
  rank: number;
  collective?: Collective | null;
}

const keyOf = (c: Collective | null | undefined) => (c ? `${c.pg ?? ''}\u0000${c.op}\u0000${c.seq}\u0000${c.state}` : '');

export class PositionWatch {
  /** session -> rank -> (position, when it was first seen there) */
  private seen = new Map<string, Map<number, { key: string; sinceMs: number }>>();

  /** The ranks of `session` whose position changed (or first appeared) less than `STILL_MS` before `nowMs`. */
  moving(session: string, ranks: RankPosition[], nowMs: number): Set<number> {
    const old = this.seen.get(session) ?? new Map<number, { key: string; sinceMs: number }>();
    const next = new Map<number, { key: string; sinceMs: number }>();
    const out = new Set<number>();
    for (const r of ranks) {
      const key = keyOf(r.collective);
      const was = old.get(r.rank);
      const sinceMs = was && was.key === key ? was.sinceMs : nowMs;
      next.set(r.rank, { key, sinceMs });
      if (nowMs - sinceMs < STILL_MS) out.add(r.rank);
    }
    this.seen.set(session, next);
    return out;
  }

  /** Forget the sessions not in `live` (ended ones). */
  keep(live: Set<string>): void {
    for (const sid of [...this.seen.keys()]) if (!live.has(sid)) this.seen.delete(sid);
  }
}
