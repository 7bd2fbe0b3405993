/**
 * The `collective` field of a rank (contract C2: per rank in `rtdebug ps --json`, read from the rank's record
 * file, which anyone who can write the session dir could have forged): checked field by field, so that
 * only well-formed values reach the views (ranks/collectiveText.ts says them) and the stepping decisions.
 */
export interface Collective {
  op: string;
  seq: number;
  state: 'entered' | 'returned';
  file?: string;
  line?: number;
  func?: string;
  pg?: string;
  /** Wall time of entry, seconds since the epoch. */
  since?: number;
  dtype?: string;
}

/** A collective entered this long ago and not returned is shown as blocked (a healthy one takes milliseconds). */
export const COLLECTIVE_BLOCKED_AFTER_S = 3;

const str = (v: unknown, max: number) => (typeof v === 'string' && v.length <= max ? v : undefined);
const nat = (v: unknown) => (typeof v === 'number' && Number.isInteger(v) && v >= 0 ? v : undefined);

export function parseCollective(raw: unknown): Collective | null {
  if (typeof raw !== 'object' || raw === null) return null;
  const c = raw as Record<string, unknown>;
  const op = typeof c.op === 'string' && /^[A-Z][A-Z0-9_]{0,39}$/.test(c.op) ? c.op : undefined;
  const seq = nat(c.seq);
  if (!op || seq === undefined || (c.state !== 'entered' && c.state !== 'returned')) return null;
  const since = typeof c.since === 'number' && Number.isFinite(c.since) && c.since > 0 ? c.since : undefined;
  return {
    op,
    seq,
    state: c.state,
    file: str(c.file, 4096),
    line: nat(c.line),
    func: str(c.func, 200),
    pg: str(c.pg, 200),
    since,
    dtype: str(c.dtype, 40),
  };
}

/** Seconds since the rank entered it (undefined: the record has no entry time). */
export const waited = (c: Collective, nowMs: number): number | undefined => (c.since !== undefined ? nowMs / 1000 - c.since : undefined);

export function isBlocked(c: Collective | null | undefined, nowMs: number): boolean {
  const w = c?.state === 'entered' ? waited(c, nowMs) : undefined;
  return w !== undefined && w >= COLLECTIVE_BLOCKED_AFTER_S;
}
