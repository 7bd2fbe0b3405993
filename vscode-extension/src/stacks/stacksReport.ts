import { nat, oneLine } from '../common/rankList';
import { History, parseHistory } from './stacksHistory';

/**
 * `rtdebug stacks --json` (issue 11): the main-thread stacks of every rank, grouped by identical stack,
 * with the verdict, the Flight Recorder note, the fallback ranks and `--history`'s alignment. This asks for
 * it (takeStacks) and parses it, every value checked: a job-wide answer comes through a store a peer could
 * write. The view's rows are built from it in stacksModel.ts.
 */
/** `kind`: "library" for torch's and other installed code (newer harnesses), so a row can name the user's frame. */
export interface Frame {
  file: string;
  line: number;
  function: string;
  kind?: string;
}
/**
 * A rank's place in the collective sequence, per group (contract C3). From the Flight Recorder also: its
 * process group `pg`, who `issued` it ("python" through torch.distributed's functions, "torch" from C++),
 * `by` ("DDP", "FSDP") and `during` ("backward()").
 */
export interface GroupCollective {
  rank: number;
  op: string;
  seq: number;
  state: string;
  file?: string;
  line?: number;
  pg?: string;
  issued?: string;
  by?: string;
  during?: string;
}
export interface StackGroup {
  ranks: number[];
  frames: Frame[];
  threads?: unknown;
  collectives?: GroupCollective[];
}
/** A rank whose stack came from the signal-time faulthandler dump (its dump thread did not answer), and why. */
export interface Fallback {
  rank: number;
  reason: string;
}
/**
 * `verdict`: the one line naming the rank that is elsewhere (contract C3); `culprit`: the rank to attach to;
 * `flightNote`: the one line saying torch's Flight Recorder is off in some ranks; `collectivesFrom`: where
 * the positions came from ("flight recorder" | "record"); `history`: `--history`'s alignment.
 */
export interface StacksReport {
  session_id: string;
  taken_at?: number;
  groups: StackGroup[];
  unresponsive: number[];
  verdict?: string;
  culprit?: number;
  /** the headline said before the verdict: a job that moves (then no verdict), or which rank stands still */
  motionLine?: string;
  flightNote?: string;
  collectivesFrom?: string;
  fallback: Fallback[];
  history?: History;
}

function groupCollectives(v: unknown): GroupCollective[] | undefined {
  if (!Array.isArray(v)) return undefined;
  return v
    .filter(
      (c): c is Record<string, unknown> =>
        typeof c === 'object' && c !== null && nat(c.rank) !== undefined && typeof c.op === 'string' && nat(c.seq) !== undefined,
    )
    .map((c) => ({
      rank: c.rank as number,
      op: String(c.op).slice(0, 40),
      seq: c.seq as number,
      state: String(c.state ?? '').slice(0, 20),
      file: typeof c.file === 'string' ? c.file : undefined,
      line: nat(c.line),
      ...flightFields(c),
    }));
}

/** The Flight Recorder's fields of a group collective, only those present and plausible. */
function flightFields(c: Record<string, unknown>): Pick<GroupCollective, 'pg' | 'issued' | 'by' | 'during'> {
  const out: Pick<GroupCollective, 'pg' | 'issued' | 'by' | 'during'> = {};
  const pg = oneLine(typeof c.pg === 'number' ? String(c.pg) : c.pg, 60);
  if (pg !== undefined) out.pg = pg;
  if (c.issued === 'python' || c.issued === 'torch') out.issued = c.issued;
  const by = oneLine(c.by, 20);
  if (by !== undefined) out.by = by;
  const during = oneLine(c.during, 40);
  if (during !== undefined) out.during = during;
  return out;
}

function parseFallback(v: unknown): Fallback[] {
  if (!Array.isArray(v)) return [];
  return v.flatMap((f) => {
    const rank = typeof f === 'object' && f !== null ? nat((f as { rank?: unknown }).rank) : undefined;
    return rank === undefined ? [] : [{ rank, reason: oneLine((f as { reason?: unknown }).reason, 200) ?? 'no reason given' }];
  });
}

export function parseStacks(text: string): StacksReport {
  let v: Record<string, unknown>;
  try {
    v = JSON.parse(text);
  } catch {
    throw new Error(`stacks --json printed no JSON: ${text.slice(0, 120)}`);
  }
  if (typeof v !== 'object' || v === null || !Array.isArray(v.groups)) throw new Error('stacks --json: no "groups" list');
  const groups: StackGroup[] = (v.groups as Record<string, unknown>[]).map((g, i) => {
    if (!Array.isArray(g.ranks) || !Array.isArray(g.frames)) throw new Error(`stacks --json: group ${i} needs "ranks" and "frames"`);
    return {
      ranks: (g.ranks as unknown[]).map(Number).sort((a, b) => a - b),
      // line is null when the dump could not tell (faulthandler's "???"): 0 here, shown without a line.
      frames: (g.frames as Record<string, unknown>[]).map((f) => ({
        file: String(f.file ?? ''),
        line: Number(f.line ?? 0),
        function: String(f.function ?? '?'),
        kind: typeof f.kind === 'string' ? f.kind : undefined,
      })),
      threads: g.threads,
      collectives: groupCollectives(g.collectives),
    };
  });
  groups.sort((a, b) => b.ranks.length - a.ranks.length || a.ranks[0] - b.ranks[0]);
  const unresponsive = Array.isArray(v.unresponsive)
    ? (v.unresponsive as unknown[]).map((u) => Number(typeof u === 'object' && u ? (u as { rank?: unknown }).rank : u))
    : [];
  return {
    session_id: String(v.session_id ?? ''),
    taken_at: typeof v.taken_at === 'number' ? v.taken_at : undefined,
    groups,
    unresponsive,
    verdict: oneLine(v.verdict, 500),
    culprit: nat(v.culprit),
    motionLine: oneLine(v.motion_line, 500),
    flightNote: oneLine(v.flight_note, 500),
    collectivesFrom: oneLine(v.collectives_from, 40),
    fallback: parseFallback(v.fallback),
    history: parseHistory(v.history),
  };
}

/** `stacks` arguments: one session (one rank), the history the view shows, JSON. */
export function stacksArgs(session: string, rank?: number, history?: number): string[] {
  return [
    'stacks',
    '--session',
    session,
    ...(rank !== undefined ? ['--rank', String(rank)] : []),
    ...(history ? ['--history', String(history)] : []),
    '--json',
  ];
}

/** Whether a failed `stacks` call was a harness too old for `--history` (argparse's words): ask again without it. */
export const historyRejected = (message: string): boolean => /unrecognized arguments:.*--history/.test(message);

/**
 * The report of `stacks ... --history N --json` through `run` (the CLI's stdout for these arguments); a
 * harness from before `--history` refuses the flag, so it is asked again without, and the report has no
 * history. Any other failure is the caller's.
 */
export async function takeStacks(
  run: (args: string[]) => Promise<string>,
  session: string,
  rank: number | undefined,
  history: number,
): Promise<StacksReport> {
  const out = await run(stacksArgs(session, rank, history)).catch((e: Error) => {
    if (!historyRejected(e.message)) throw e;
    return run(stacksArgs(session, rank));
  });
  return parseStacks(out);
}
