import { formatDuration } from './duration';
import { basename } from './fileName';

/**
 * Each rank's place in the collective sequence (contract C2: `collective` per rank in `rtdebug ps --json`,
 * read from the rank's record file, which anyone who can write the session dir could have forged): checked
 * field by field here, then turned into the Ranks view's words — `ALLREDUCE #12 returned`, a rank blocked
 * in one (`blocked in ALLREDUCE #12 (train.py:42) 40s`), its peers' positions, and whether they differ.
 */
export interface Collective {
  op: string; seq: number; state: 'entered' | 'returned'; file?: string; line?: number; func?: string; pg?: string;
  /** Wall time of entry, seconds since the epoch. */
  since?: number; dtype?: string;
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
  return { op, seq, state: c.state, file: str(c.file, 4096), line: nat(c.line), func: str(c.func, 200), pg: str(c.pg, 200), since, dtype: str(c.dtype, 40) };
}

const where = (c: Collective) => (c.file ? ` (${basename(c.file)}${c.line ? `:${c.line}` : ''})` : '');
const waited = (c: Collective, nowMs: number) => (c.since !== undefined ? nowMs / 1000 - c.since : undefined);

export function isBlocked(c: Collective | null | undefined, nowMs: number): boolean {
  const w = c?.state === 'entered' ? waited(c, nowMs) : undefined;
  return w !== undefined && w >= COLLECTIVE_BLOCKED_AFTER_S;
}

/**
 * The rank row's fragment: `ALLREDUCE #12 returned`, `ALLREDUCE #12 entered`, or `blocked in ALLREDUCE #12
 * (train.py:42) 40s`. A rank stopped in the debugger while its record says entered was stopped at the
 * collective before it ran (Run to Next Collective): `at ALLREDUCE #12, not run yet`, not blocked.
 */
export function collectiveText(c: Collective | null | undefined, nowMs: number, stopped = false): string | undefined {
  if (!c) return undefined;
  if (stopped && c.state === 'entered') return `at ${c.op} #${c.seq}, not run yet`;
  if (isBlocked(c, nowMs)) return `blocked in ${c.op} #${c.seq}${where(c)} ${formatDuration(waited(c, nowMs)!)}`;
  return `${c.op} #${c.seq} ${c.state}`;
}

export interface RankCollective { rank: number; collective?: Collective | null }

/** The tooltip lines of every rank's position, this rank marked: what a blocked rank waits for. */
export function peersTooltip(ranks: RankCollective[], self: number, nowMs: number): string[] {
  if (!ranks.some((r) => r.collective)) return [];
  return ['collectives (rtdebug ps):', ...ranks.map((r) => {
    const c = r.collective;
    const text = c ? `${c.op} #${c.seq} ${c.state}${where(c)}${c.state === 'entered' && c.since ? ` ${formatDuration(waited(c, nowMs)!)} ago` : ''}${c.pg && c.pg !== 'default' && c.pg !== '0' ? ` [group ${c.pg}]` : ''}` : 'none yet';
    return `  rank ${r.rank}: ${text}${r.rank === self ? '  ← this rank' : ''}`;
  })];
}

/**
 * One line for the session row: `all at ALLREDUCE #12` when every rank that reports a position is at the same
 * op and sequence number (per process group), else `collectives differ: rank 0 ALLREDUCE #12 · rank 1 BARRIER #3`.
 */
export function collectiveSummary(ranks: RankCollective[]): { text: string; differ: boolean } | undefined {
  const known = ranks.filter((r): r is { rank: number; collective: Collective } => !!r.collective);
  if (known.length < 2) return undefined;
  const keyOf = (c: Collective) => `${c.op} #${c.seq}`;
  const byPg = new Map<string, Set<string>>();
  for (const r of known) {
    const pg = r.collective.pg ?? '';
    byPg.set(pg, (byPg.get(pg) ?? new Set()).add(keyOf(r.collective)));
  }
  const differ = [...byPg.values()].some((s) => s.size > 1) || byPg.size > 1;
  if (!differ) return { text: `all at ${keyOf(known[0].collective)}`, differ: false };
  return { text: `collectives differ: ${known.map((r) => `rank ${r.rank} ${keyOf(r.collective)}`).join(' · ')}`, differ: true };
}
