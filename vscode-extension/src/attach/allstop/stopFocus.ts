import { oneLine } from '../../common/rankList';

/**
 * Which rank session takes the focus when `--stop-on` stops every rank (issue 30). The harness describes
 * each stop (`rtdebug --stop-on nonfinite: <reason>`) and leaves `preserveFocusHint` false only where it
 * began (the origin; every rank for `step=N`, which has none), true elsewhere. Per job, the first such
 * origin event focuses its rank; the later ones (another origin, the same event seen by more ranks) do not
 * move the focus again, until that rank runs again (the next event is a new episode). Pure.
 */
export const STOP_ON_PREFIX = 'rtdebug --stop-on ';

export interface StopEvent {
  rank: number;
  description?: string;
  preserveFocusHint?: boolean;
}

/** `rtdebug --stop-on nonfinite: <reason>` → kind and reason (one line each), else undefined. */
export function parseStopDescription(d: unknown): { kind: string; reason: string } | undefined {
  if (typeof d !== 'string' || !d.startsWith(STOP_ON_PREFIX)) return undefined;
  const m = /^([a-z]{1,12}): ([\s\S]*)$/.exec(d.slice(STOP_ON_PREFIX.length));
  if (!m) return undefined;
  return { kind: m[1], reason: oneLine(m[2], 120) ?? '' };
}

export class StopOnFocus {
  /** job session id → the rank focused in the current episode */
  private focused = new Map<string, number>();

  /** A `stopped` event of an attached rank of `session`: the rank to focus now, or undefined. */
  stopped(session: string, ev: StopEvent): number | undefined {
    if (!parseStopDescription(ev.description) || ev.preserveFocusHint !== false) return undefined;
    if (this.focused.has(session)) return undefined;
    this.focused.set(session, ev.rank);
    return ev.rank;
  }

  /** The rank runs again (continued, stepped) or its session ended: the focused one ends the episode. */
  resumed(session: string, rank: number): void {
    if (this.focused.get(session) === rank) this.focused.delete(session);
  }
}
