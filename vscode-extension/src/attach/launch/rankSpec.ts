/** Rank lists as the harness writes them (`--wait 0,2-3`) and the port rule. */

export class RankSpecError extends Error {}

/** "all" / "none" / "0,2-3" → the ranks it names out of `worldSize` (undefined = unknown world size). */
export function parseRankList(spec: string, worldSize?: number): number[] {
  const s = spec.trim();
  if (s === 'none' || s === '') return [];
  if (s === 'all') {
    if (worldSize === undefined) throw new RankSpecError('"all" needs a known world size');
    return Array.from({ length: worldSize }, (_, i) => i);
  }
  const out = new Set<number>();
  for (const part of s.split(',')) {
    const m = /^\s*(\d+)\s*(?:-\s*(\d+)\s*)?$/.exec(part);
    if (!m) throw new RankSpecError(`bad rank list "${spec}": expected e.g. 0,2-3`);
    const lo = Number(m[1]);
    const hi = m[2] === undefined ? lo : Number(m[2]);
    if (hi < lo) throw new RankSpecError(`bad rank range "${part.trim()}" in "${spec}"`);
    for (let r = lo; r <= hi; r++) out.add(r);
  }
  return [...out].sort((a, b) => a - b);
}

/** Is this a valid --wait policy? */
export function isWaitPolicy(spec: string): boolean {
  if (spec === 'all' || spec === 'none') return true;
  try {
    parseRankList(spec);
    return true;
  } catch {
    return false;
  }
}

/** The port rule shared with the harness: port = base + global RANK (never LOCAL_RANK). */
export function portForRank(base: number, rank: number): number {
  const port = base + rank;
  if (!Number.isInteger(port) || port < 1 || port > 65535) throw new RankSpecError(`port ${port} for rank ${rank} is out of range`);
  return port;
}
