import { basename } from '../common/fileName';
import { compressRanks, nat, oneLine, ranksWord } from '../common/rankList';
import { History, parseHistory } from './stacksHistory';

export { compressRanks };

/**
 * `rtdebug stacks --json` (issue 11): the main-thread stacks of every rank, grouped by identical stack,
 * largest group first. This parses it and builds the rows of the "Rank Stacks" view: a group per line
 * (`ranks 0,2-3: all_reduce ← train_step (train.py:42)`), its frames innermost first, each opening the
 * source at its line, and the ranks that did not answer.
 */
/** `kind`: "library" for torch's and other installed code (newer harnesses), so a row can name the user's frame. */
export interface Frame { file: string; line: number; function: string; kind?: string }
/**
 * A rank's place in the collective sequence, per group (contract C3). From the Flight Recorder also: its
 * process group `pg`, who `issued` it ("python" through torch.distributed's functions, "torch" from C++),
 * `by` ("DDP", "FSDP") and `during` ("backward()").
 */
export interface GroupCollective {
  rank: number; op: string; seq: number; state: string; file?: string; line?: number;
  pg?: string; issued?: string; by?: string; during?: string;
}
export interface StackGroup { ranks: number[]; frames: Frame[]; threads?: unknown; collectives?: GroupCollective[] }
/** A rank whose stack came from the signal-time faulthandler dump (its dump thread did not answer), and why. */
export interface Fallback { rank: number; reason: string }
/**
 * `verdict`: the one line naming the rank that is elsewhere (contract C3); `culprit`: the rank to attach to;
 * `flightNote`: the one line saying torch's Flight Recorder is off in some ranks; `collectivesFrom`: where
 * the positions came from ("flight recorder" | "record"); `history`: `--history`'s alignment.
 */
export interface StacksReport {
  session_id: string; taken_at?: number; groups: StackGroup[]; unresponsive: number[]; verdict?: string; culprit?: number;
  flightNote?: string; collectivesFrom?: string; fallback: Fallback[]; history?: History;
}

function groupCollectives(v: unknown): GroupCollective[] | undefined {
  if (!Array.isArray(v)) return undefined;
  return v.filter((c): c is Record<string, unknown> => typeof c === 'object' && c !== null && nat(c.rank) !== undefined && typeof c.op === 'string' && nat(c.seq) !== undefined)
    .map((c) => ({ rank: c.rank as number, op: String(c.op).slice(0, 40), seq: c.seq as number, state: String(c.state ?? '').slice(0, 20),
      file: typeof c.file === 'string' ? c.file : undefined, line: nat(c.line), ...flightFields(c) }));
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
  try { v = JSON.parse(text); } catch { throw new Error(`stacks --json printed no JSON: ${text.slice(0, 120)}`); }
  if (typeof v !== 'object' || v === null || !Array.isArray(v.groups)) throw new Error('stacks --json: no "groups" list');
  const groups: StackGroup[] = (v.groups as Record<string, unknown>[]).map((g, i) => {
    if (!Array.isArray(g.ranks) || !Array.isArray(g.frames)) throw new Error(`stacks --json: group ${i} needs "ranks" and "frames"`);
    return {
      ranks: (g.ranks as unknown[]).map(Number).sort((a, b) => a - b),
      // line is null when the dump could not tell (faulthandler's "???"): 0 here, shown without a line.
      frames: (g.frames as Record<string, unknown>[]).map((f) => ({ file: String(f.file ?? ''), line: Number(f.line ?? 0), function: String(f.function ?? '?'),
        kind: typeof f.kind === 'string' ? f.kind : undefined })),
      threads: g.threads,
      collectives: groupCollectives(g.collectives),
    };
  });
  groups.sort((a, b) => b.ranks.length - a.ranks.length || a.ranks[0] - b.ranks[0]);
  const unresponsive = Array.isArray(v.unresponsive) ? (v.unresponsive as unknown[]).map((u) => Number(typeof u === 'object' && u ? (u as { rank?: unknown }).rank : u)) : [];
  return { session_id: String(v.session_id ?? ''), taken_at: typeof v.taken_at === 'number' ? v.taken_at : undefined, groups, unresponsive,
    verdict: oneLine(v.verdict, 500), culprit: nat(v.culprit), flightNote: oneLine(v.flight_note, 500),
    collectivesFrom: oneLine(v.collectives_from, 40), fallback: parseFallback(v.fallback), history: parseHistory(v.history) };
}

/** `stacks` arguments: one session (one rank), the history the view shows, JSON. */
export function stacksArgs(session: string, rank?: number, history?: number): string[] {
  return ['stacks', '--session', session, ...(rank !== undefined ? ['--rank', String(rank)] : []), ...(history ? ['--history', String(history)] : []), '--json'];
}

/** Whether a failed `stacks` call was a harness too old for `--history` (argparse's words): ask again without it. */
export const historyRejected = (message: string): boolean => /unrecognized arguments:.*--history/.test(message);

/**
 * The report of `stacks ... --history N --json` through `run` (the CLI's stdout for these arguments); a
 * harness from before `--history` refuses the flag, so it is asked again without, and the report has no
 * history. Any other failure is the caller's.
 */
export async function takeStacks(run: (args: string[]) => Promise<string>, session: string, rank: number | undefined, history: number): Promise<StacksReport> {
  const out = await run(stacksArgs(session, rank, history)).catch((e: Error) => {
    if (!historyRejected(e.message)) throw e;
    return run(stacksArgs(session, rank));
  });
  return parseStacks(out);
}

/** Index of the innermost frame where `g` departs from the largest group (compared from the outermost). */
export function departsAt(g: StackGroup, majority: StackGroup): number | undefined {
  if (g === majority) return undefined;
  const a = [...g.frames].reverse();
  const b = [...majority.frames].reverse();
  let k = 0;
  while (k < a.length && k < b.length && sameFrame(a[k], b[k])) k++;
  return k < a.length ? g.frames.length - 1 - k : undefined;
}

const sameFrame = (x: Frame, y: Frame) => x.file === y.file && x.line === y.line && x.function === y.function;
const at = (f: Frame) => (f.line > 0 ? `${basename(f.file)}:${f.line}` : basename(f.file));

export interface GroupRow { label: string; description: string; tooltip: string; representative: number; accessibilityLabel: string; fallback: boolean }
export interface FrameRow { label: string; description: string; tooltip: string; file: string; line: number; departs: boolean }

/** A collective as the tooltip says it: op, seq, state, call site, who issued it and in which group. */
function collectiveLine(c: GroupCollective): string {
  const site = c.file ? ` (${basename(c.file)}${c.line ? `:${c.line}` : ''})` : '';
  const issued = c.issued === 'torch' ? ` issued by ${c.by ?? 'torch'}${c.during ? ` during ${c.during}` : ''}` : '';
  const group = c.pg !== undefined && c.pg !== '0' ? ` of group ${c.pg}` : '';
  return `  rank ${c.rank}: ${c.op} #${c.seq} ${c.state}${site}${issued}${group}`;
}

const FROM: Record<string, string> = { 'flight recorder': "torch's Flight Recorder", record: "rtdebug's record of Python-level collectives" };

/**
 * A group's row. `fallback`: the report's ranks whose stack is the signal-time dump (their dump thread did
 * not answer: a C call may hold the GIL), marked on the group they fall in; `from`: `collectives_from`.
 */
export function groupRow(g: StackGroup, majority: StackGroup, fallback: Fallback[] = [], from?: string): GroupRow {
  const who = ranksWord(g.ranks);
  const top = g.frames[0];
  // in a library (torch's all_reduce ← its logging wrapper): name the user's frame that called it, as `rtdebug stacks` does
  const user = top?.kind === 'library' ? g.frames.findIndex((f, i) => i > 0 && f.kind === 'user') : -1;
  const caller = user > 0 ? g.frames[user] : g.frames[1];
  const summary = top ? `${top.function}${caller ? ` ← ${caller.function}` : ''} (${at(user > 0 ? caller : top)})` : '(no Python frames)';
  const odd = g !== majority ? ' · differs from the majority' : '';
  const colls = g.collectives ?? [];
  const keys = [...new Set(colls.map((c) => `${c.op} #${c.seq} ${c.state}${c.by ? ` by ${c.by}` : ''}`))];
  const coll = keys.length === 1 ? ` · ${keys[0]}` : keys.length > 1 ? ' · collectives differ' : '';
  const fb = fallback.filter((f) => g.ranks.includes(f.rank));
  const fbText = fb.length ? ` · ${ranksWord(fb.map((f) => f.rank))}: ${FALLBACK}` : '';
  const fbLines = fb.map((f) => `rank ${f.rank}: signal-time dump (fallback: ${f.reason}; a C call may hold its GIL), read without the GIL`);
  const collHead = `collectives${from && FROM[from] ? ` (from ${FROM[from]})` : ''}:`;
  return {
    label: `${who}: ${summary}`,
    description: `${g.ranks.length} rank(s)${coll}${fbText}${odd}`,
    tooltip: `${who}\n${g.frames.map((f) => `  ${f.function}  ${f.file}:${f.line}`).join('\n')}${colls.length ? `\n${collHead}\n${colls.map(collectiveLine).join('\n')}` : ''}${fbLines.length ? `\n${fbLines.join('\n')}` : ''}`,
    representative: g.ranks[0],
    accessibilityLabel: `${who}, ${g.ranks.length} ranks, innermost ${summary}${fbText}${odd}`,
    fallback: fb.length > 0,
  };
}

/** How a rank whose stack came from the signal-time fallback is marked. */
export const FALLBACK = 'signal-time dump (fallback)';

export function frameRows(g: StackGroup, majority: StackGroup): FrameRow[] {
  const d = departsAt(g, majority);
  return g.frames.map((f, i) => ({
    label: f.function,
    description: `${at(f)}${i === d ? ' · departs from the majority here' : ''}`,
    tooltip: f.line > 0 ? `${f.file}:${f.line}` : f.file,
    file: f.file, line: f.line, departs: i === d,
  }));
}

/** The row that leads the view when the stacks name a culprit, and its one-click attach. */
export interface VerdictRow { label: string; tooltip: string; attachLabel?: string; accessibilityLabel: string }

export function verdictRow(rep: StacksReport): VerdictRow | undefined {
  if (!rep.verdict) return undefined;
  const c = rep.culprit;
  const from = rep.collectivesFrom && FROM[rep.collectivesFrom] ? `\nCollective positions from ${FROM[rep.collectivesFrom]}.` : '';
  return {
    label: rep.verdict,
    tooltip: `${rep.verdict}${from}${c !== undefined ? `\nAttach to rank ${c} to see where it is.` : ''}`,
    attachLabel: c !== undefined ? `Attach to rank ${c}` : undefined,
    accessibilityLabel: `verdict: ${rep.verdict}`,
  };
}

/** The view's top rows, in order: the verdict, the Flight Recorder note, the groups, the unresponsive ranks, the history. */
export type StacksRoot = { kind: 'verdict' } | { kind: 'note' } | { kind: 'group'; group: StackGroup } | { kind: 'unresponsive' } | { kind: 'history' };

export function stacksRoots(rep: StacksReport): StacksRoot[] {
  const out: StacksRoot[] = [];
  if (rep.verdict) out.push({ kind: 'verdict' });
  if (rep.flightNote) out.push({ kind: 'note' });
  out.push(...rep.groups.map((group) => ({ kind: 'group' as const, group })));
  if (rep.unresponsive.length) out.push({ kind: 'unresponsive' });
  if (rep.history) out.push({ kind: 'history' });
  return out;
}

/** The Flight Recorder note, second after the verdict (first when there is none), as `rtdebug stacks` prints it. */
export function flightNoteRow(rep: StacksReport): { label: string; tooltip: string; accessibilityLabel: string } | undefined {
  if (!rep.flightNote) return undefined;
  return {
    label: rep.flightNote,
    tooltip: `${rep.flightNote}\nThose ranks have no collective history either; the collectives shown are the ones called from Python.`,
    accessibilityLabel: `note: ${rep.flightNote}`,
  };
}
