import { formatDuration } from '../common/duration';
import { basename } from '../common/fileName';
import { ranksWord } from '../common/rankList';
import { Collective, isBlocked, waited } from '../registry/collectiveRecord';

/**
 * Each rank's place in the collective sequence (contract C2, checked in registry/collectiveRecord.ts) in the
 * Ranks view's words — `ALLREDUCE #12 returned`, a rank blocked in one (`blocked in ALLREDUCE #12
 * (train.py:42) 40s`), its peers' positions, and whether they differ.
 */
const where = (c: Collective) => (c.file ? ` (${basename(c.file)}${c.line ? `:${c.line}` : ''})` : '');

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

export interface RankCollective {
  rank: number;
  collective?: Collective | null;
}

/** Beyond this many ranks, the peers' positions are listed grouped (ranks with the same text on one line). */
export const PEERS_LISTED = 32;

/** The tooltip lines of every rank's position, this rank marked: what a blocked rank waits for. */
export function peersTooltip(ranks: RankCollective[], self: number, nowMs: number): string[] {
  if (!ranks.some((r) => r.collective)) return [];
  const text = (c: Collective | null | undefined) =>
    c
      ? `${c.op} #${c.seq} ${c.state}${where(c)}${c.state === 'entered' && c.since ? ` ${formatDuration(waited(c, nowMs)!)} ago` : ''}${c.pg && c.pg !== 'default' && c.pg !== '0' ? ` [group ${c.pg}]` : ''}`
      : 'none yet';
  if (ranks.length <= PEERS_LISTED)
    return [
      'collectives (rtdebug ps):',
      ...ranks.map((r) => `  rank ${r.rank}: ${text(r.collective)}${r.rank === self ? '  ← this rank' : ''}`),
    ];
  // a 1024-rank job: one line per distinct position, not per rank
  const byText = new Map<string, number[]>();
  for (const r of ranks) byText.set(text(r.collective), [...(byText.get(text(r.collective)) ?? []), r.rank]);
  return [
    'collectives (rtdebug ps):',
    ...[...byText].map(([t, rs]) => `  ${ranksWord(rs)}: ${t}${rs.includes(self) ? '  ← this rank' : ''}`),
  ];
}

/**
 * One line for the session row: `all at ALLREDUCE #12` when every rank that reports a position is at the same
 * op and sequence number (per process group), else `collectives differ: rank 0 ALLREDUCE #12 · rank 1 BARRIER #3`
 * (`differ`: the hang badge) — only when no rank is `moving` (positionWatch.ts): positions that changed across
 * the last polls are a job at work, said `collectives moving: …`, no badge.
 */
const SUMMARY_POSITIONS = 4;

export function collectiveSummary(ranks: RankCollective[], moving?: ReadonlySet<number>): { text: string; differ: boolean } | undefined {
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
  // ranks at the same position named together, the first few positions only: a row stays one short line
  const byKey = new Map<string, number[]>();
  for (const r of known) byKey.set(keyOf(r.collective), [...(byKey.get(keyOf(r.collective)) ?? []), r.rank]);
  const parts = [...byKey].map(([k, rs]) => `${ranksWord(rs)} ${k}`);
  const more = parts.length > SUMMARY_POSITIONS ? ` · +${parts.length - SUMMARY_POSITIONS} more` : '';
  const moves = known.some((r) => moving?.has(r.rank));
  const head = moves ? 'collectives moving' : 'collectives differ';
  return { text: `${head}: ${parts.slice(0, SUMMARY_POSITIONS).join(' · ')}${more}`, differ: !moves };
}
