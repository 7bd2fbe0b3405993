/**
 * `"mode": "replay"` and **rtdebug: Replay a Rank…**: one captured rank of a job (a `--capture DIR` capsule)
 * run alone by `rtdebug replay DIR --rank R`. Pure: what the harness says of a capsule (`rtdebug capsule DIR
 * --json`, read here as input that may be anything), the ranks offered, the configuration F5 runs and the
 * command line it becomes. The capsule's format is the harness's; nothing here reads its files.
 */

export interface CapsuleRank {
  rank: number;
  collectives: number;
  bytes: number;
  completeUpto: number;
  endReason: string;
}

export interface CapsuleInfo {
  dir: string;
  worldSize: number;
  script: string;
  scriptState: string; // same | differs | missing | module
  ranks: CapsuleRank[];
}

export interface ReplayOptions {
  capsule: string;
  rank: number;
  script?: string;
  stopAtCollective?: number;
  noCheck?: boolean;
  checkTolerance?: number;
}

const int = (v: unknown): number | undefined => (typeof v === 'number' && Number.isInteger(v) && v >= 0 ? v : undefined);
const str = (v: unknown): string => (typeof v === 'string' ? v : '');

/** `rtdebug capsule DIR --json`'s answer, checked field by field; throws one sentence when it is not one. */
export function parseCapsuleInfo(text: string): CapsuleInfo {
  let data: unknown;
  try {
    data = JSON.parse(text);
  } catch {
    throw new Error('rtdebug capsule --json printed something that is not JSON');
  }
  const d = data as Record<string, unknown>;
  const worldSize = int(d?.world_size);
  if (!d || typeof d !== 'object' || !worldSize || !Array.isArray(d.ranks)) {
    throw new Error('rtdebug capsule --json: not a capsule summary (no world_size or ranks)');
  }
  const ranks: CapsuleRank[] = [];
  for (const r of d.ranks as Record<string, unknown>[]) {
    const rank = int(r?.rank);
    if (rank === undefined || rank >= worldSize) continue; // the harness checked; a bad row is left out
    ranks.push({
      rank,
      collectives: int(r.collectives) ?? 0,
      bytes: int(r.bytes) ?? 0,
      completeUpto: int(r.complete_upto) ?? 0,
      endReason: str(r.end_reason),
    });
  }
  const today = (d.script_today ?? {}) as Record<string, unknown>;
  return { dir: str(d.dir), worldSize, script: str(d.script), scriptState: str(today.state), ranks };
}

/** Where a rank's capture ends, in words (as `rtdebug capsule` says it). */
export function captureEnd(r: CapsuleRank): string {
  if (r.endReason === 'ended') return `complete (#1-#${r.completeUpto})`;
  if (!r.endReason) return `open: up to #${r.completeUpto}`;
  return `closed after #${r.completeUpto}: ${r.endReason}`;
}

export interface RankPick {
  label: string;
  description: string;
  rank: number;
}

/** The Quick Pick of **Replay a Rank…**: every captured rank, with its collectives and where it ends. */
export function rankPicks(info: CapsuleInfo): RankPick[] {
  return info.ranks.map((r) => ({
    label: `rank ${r.rank}`,
    description: `${r.collectives} collectives · ${captureEnd(r)}`,
    rank: r.rank,
  }));
}

/** Why `rank` cannot be replayed from `info` (undefined: it can). */
export function rankProblem(info: CapsuleInfo, rank: unknown): string | undefined {
  const r = typeof rank === 'string' && rank.trim() !== '' ? Number(rank) : rank;
  if (typeof r !== 'number' || !Number.isInteger(r) || r < 0) return `"rank": ${String(rank)} is not a rank number.`;
  if (r >= info.worldSize) return `rank ${r} is out of range: the job had ranks 0-${info.worldSize - 1}.`;
  if (!info.ranks.some((x) => x.rank === r)) {
    const held = info.ranks.map((x) => x.rank).join(',') || 'none';
    return `rank ${r} was not captured: the capsule holds ranks ${held}.`;
  }
  return undefined;
}

/** A note for the start when today's script is not the captured one (undefined: nothing to say). */
export function scriptNote(info: CapsuleInfo): string | undefined {
  if (info.scriptState === 'differs')
    return `${info.script} is not the captured script: the replay says where it first sends something else.`;
  if (info.scriptState === 'missing') return `the captured script ${info.script} is not here: set "script" in the configuration.`;
  return undefined;
}

/** The launch configuration **Replay a Rank…** starts (and `"mode": "replay"` users write). */
export function replayConfiguration(capsule: string, rank: number): Record<string, unknown> {
  return {
    type: 'rtdebug',
    request: 'launch',
    name: `rtdebug: replay rank ${rank}`,
    mode: 'replay',
    capsule,
    rank,
    wait: 'all',
  };
}

/** `rtdebug replay`'s words after the module: the capsule, the rank, the endpoint and the replay's options. */
export function replayArgs(o: ReplayOptions, port: number, host: string, wait: boolean): string[] {
  const a = ['replay', o.capsule, '--rank', String(o.rank), '--port', String(port), '--host', host];
  if (wait) a.push('--wait');
  if (o.script) a.push('--script', o.script);
  if (o.stopAtCollective !== undefined) a.push('--stop-at-collective', String(o.stopAtCollective));
  if (o.noCheck) a.push('--no-check');
  if (o.checkTolerance !== undefined) a.push('--check-tolerance', String(o.checkTolerance));
  return a;
}

const num = (v: unknown): number | undefined => (v === undefined || v === null || v === '' ? undefined : Number(v));

/** A `"mode": "replay"` configuration's replay options (the provider has checked capsule and rank). */
export function replayOptions(c: Record<string, unknown>): ReplayOptions {
  return {
    capsule: String(c.capsule),
    rank: Number(c.rank),
    script: typeof c.script === 'string' && c.script ? c.script : undefined,
    stopAtCollective: num(c.stopAtCollective),
    noCheck: c.noCheck === true,
    checkTolerance: num(c.checkTolerance),
  };
}
