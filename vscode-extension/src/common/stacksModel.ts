import { basename } from './ranksTree';

/**
 * `rtdebug stacks --json` (issue 11): the main-thread stacks of every rank, grouped by identical stack,
 * largest group first. This parses it and builds the rows of the "Rank Stacks" view: a group per line
 * (`ranks 0,2-3: all_reduce ← train_step (train.py:42)`), its frames innermost first, each opening the
 * source at its line, and the ranks that did not answer.
 */
/** `kind`: "library" for torch's and other installed code (newer harnesses), so a row can name the user's frame. */
export interface Frame { file: string; line: number; function: string; kind?: string }
/** A rank's place in the collective sequence, per group (contract C3). */
export interface GroupCollective { rank: number; op: string; seq: number; state: string; file?: string; line?: number }
export interface StackGroup { ranks: number[]; frames: Frame[]; threads?: unknown; collectives?: GroupCollective[] }
/** `verdict`: the one line naming the rank that is elsewhere (contract C3); `culprit`: the rank to attach to. */
export interface StacksReport { session_id: string; taken_at?: number; groups: StackGroup[]; unresponsive: number[]; verdict?: string; culprit?: number }

const nat = (v: unknown) => (typeof v === 'number' && Number.isInteger(v) && v >= 0 ? v : undefined);

function groupCollectives(v: unknown): GroupCollective[] | undefined {
  if (!Array.isArray(v)) return undefined;
  return v.filter((c): c is Record<string, unknown> => typeof c === 'object' && c !== null && nat(c.rank) !== undefined && typeof c.op === 'string' && nat(c.seq) !== undefined)
    .map((c) => ({ rank: c.rank as number, op: String(c.op).slice(0, 40), seq: c.seq as number, state: String(c.state ?? '').slice(0, 20),
      file: typeof c.file === 'string' ? c.file : undefined, line: nat(c.line) }));
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
  const verdict = typeof v.verdict === 'string' && v.verdict.trim() ? v.verdict.trim().slice(0, 500) : undefined;
  return { session_id: String(v.session_id ?? ''), taken_at: typeof v.taken_at === 'number' ? v.taken_at : undefined, groups, unresponsive,
    verdict, culprit: nat(v.culprit) };
}

/** [0,2,3,4,7] → "0,2-4,7" (the harness's rank-list syntax). */
export function compressRanks(ranks: number[]): string {
  const s = [...new Set(ranks)].sort((a, b) => a - b);
  const out: string[] = [];
  for (let i = 0; i < s.length;) {
    let j = i;
    while (j + 1 < s.length && s[j + 1] === s[j] + 1) j++;
    out.push(j > i ? `${s[i]}-${s[j]}` : `${s[i]}`);
    i = j + 1;
  }
  return out.join(',');
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

export interface GroupRow { label: string; description: string; tooltip: string; representative: number; accessibilityLabel: string }
export interface FrameRow { label: string; description: string; tooltip: string; file: string; line: number; departs: boolean }

export function groupRow(g: StackGroup, majority: StackGroup): GroupRow {
  const who = `${g.ranks.length === 1 ? 'rank' : 'ranks'} ${compressRanks(g.ranks)}`;
  const top = g.frames[0];
  // in a library (torch's all_reduce ← its logging wrapper): name the user's frame that called it, as `rtdebug stacks` does
  const user = top?.kind === 'library' ? g.frames.findIndex((f, i) => i > 0 && f.kind === 'user') : -1;
  const caller = user > 0 ? g.frames[user] : g.frames[1];
  const summary = top ? `${top.function}${caller ? ` ← ${caller.function}` : ''} (${at(user > 0 ? caller : top)})` : '(no Python frames)';
  const odd = g !== majority ? ' · differs from the majority' : '';
  const colls = g.collectives ?? [];
  const keys = [...new Set(colls.map((c) => `${c.op} #${c.seq} ${c.state}`))];
  const coll = keys.length === 1 ? ` · ${keys[0]}` : keys.length > 1 ? ' · collectives differ' : '';
  const collLines = colls.map((c) => `  rank ${c.rank}: ${c.op} #${c.seq} ${c.state}${c.file ? ` (${basename(c.file)}${c.line ? `:${c.line}` : ''})` : ''}`);
  return {
    label: `${who}: ${summary}`,
    description: `${g.ranks.length} rank(s)${coll}${odd}`,
    tooltip: `${who}\n${g.frames.map((f) => `  ${f.function}  ${f.file}:${f.line}`).join('\n')}${collLines.length ? `\ncollectives:\n${collLines.join('\n')}` : ''}`,
    representative: g.ranks[0],
    accessibilityLabel: `${who}, ${g.ranks.length} ranks, innermost ${summary}${odd}`,
  };
}

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
  return {
    label: rep.verdict,
    tooltip: `${rep.verdict}${c !== undefined ? `\nAttach to rank ${c} to see where it is.` : ''}`,
    attachLabel: c !== undefined ? `Attach to rank ${c}` : undefined,
    accessibilityLabel: `verdict: ${rep.verdict}`,
  };
}
