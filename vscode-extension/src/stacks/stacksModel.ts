import { basename } from '../common/fileName';
import { compressRanks, ranksWord } from '../common/rankList';
import { Fallback, Frame, GroupCollective, StackGroup, StacksReport } from './stacksReport';

export { compressRanks };

/**
 * The rows of the "Rank Stacks" view, from a parsed `rtdebug stacks --json` (stacksReport.ts): the verdict
 * and the Flight Recorder note first, then a group per line (`ranks 0,2-3: all_reduce ← train_step
 * (train.py:42)`), its frames innermost first, each opening the source at its line, and the ranks that did
 * not answer. The history's rows are in stacksHistory.ts.
 */
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

export interface GroupRow {
  label: string;
  description: string;
  tooltip: string;
  representative: number;
  accessibilityLabel: string;
  fallback: boolean;
}
export interface FrameRow {
  label: string;
  description: string;
  tooltip: string;
  file: string;
  line: number;
  departs: boolean;
}

/** A collective as the tooltip says it: op, seq, state, call site, who issued it and in which group. */
function collectiveLine(c: GroupCollective): string {
  const site = c.file ? ` (${basename(c.file)}${c.line ? `:${c.line}` : ''})` : '';
  const issued = c.issued === 'torch' ? ` issued by ${c.by ?? 'torch'}${c.during ? ` during ${c.during}` : ''}` : '';
  const group = c.pg !== undefined && c.pg !== '0' ? ` of group ${c.pg}` : '';
  return `  rank ${c.rank}: ${c.op} #${c.seq} ${c.state}${site}${issued}${group}`;
}

const FROM: Record<string, string> = {
  'flight recorder': "torch's Flight Recorder",
  record: "rtdebug's record of Python-level collectives",
};

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
  const fbLines = fb.map(
    (f) => `rank ${f.rank}: signal-time dump (fallback: ${f.reason}; a C call may hold its GIL), read without the GIL`,
  );
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
    file: f.file,
    line: f.line,
    departs: i === d,
  }));
}

/** The row that leads the view when the stacks name a culprit, and its one-click attach. */
export interface VerdictRow {
  label: string;
  tooltip: string;
  attachLabel?: string;
  accessibilityLabel: string;
  /** the job was seen moving: the headline, no verdict (not an error) */
  progress?: boolean;
}

export function verdictRow(rep: StacksReport): VerdictRow | undefined {
  if (!rep.verdict) {
    // a job that moved has no verdict (rtdebug stacks looked twice): its headline leads the view instead
    if (!rep.motionLine) return undefined;
    return { label: rep.motionLine, tooltip: rep.motionLine, accessibilityLabel: `progress: ${rep.motionLine}`, progress: true };
  }
  const c = rep.culprit;
  const from = rep.collectivesFrom && FROM[rep.collectivesFrom] ? `\nCollective positions from ${FROM[rep.collectivesFrom]}.` : '';
  const why = rep.motionLine ? `${rep.motionLine}\n` : '';
  return {
    label: rep.verdict,
    tooltip: `${why}${rep.verdict}${from}${c !== undefined ? `\nAttach to rank ${c} to see where it is.` : ''}`,
    attachLabel: c !== undefined ? `Attach to rank ${c}` : undefined,
    accessibilityLabel: `verdict: ${rep.verdict}`,
  };
}

/** The view's top rows, in order: the verdict, the Flight Recorder note, the groups, the unresponsive ranks, the history. */
export type StacksRoot =
  { kind: 'verdict' } | { kind: 'note' } | { kind: 'group'; group: StackGroup } | { kind: 'unresponsive' } | { kind: 'history' };

export function stacksRoots(rep: StacksReport): StacksRoot[] {
  const out: StacksRoot[] = [];
  if (rep.verdict || rep.motionLine) out.push({ kind: 'verdict' });
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
