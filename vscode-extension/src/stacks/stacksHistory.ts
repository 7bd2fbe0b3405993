import { nat, oneLine, ranksWord } from '../common/rankList';

/**
 * `rtdebug stacks --history N --json`'s `history` (harness/rtdebug/stacks/history.py): each rank's last N
 * collectives from its Flight Recorder, per process group, row = sequence number, cell = op, input sizes and
 * dtype ("ALLREDUCE [[81]] Float"), "-" where the rank has not reached it; the first row whose known cells
 * differ is the first divergence. This parses it (every value checked: a store answer may be forged) and
 * builds the rows of the Rank Stacks view's "Collective history" node: one child per process group, one row
 * per sequence number, ranks with the same cell in one segment, the first divergence marked.
 */
export interface HistoryRow {
  seq: number;
  cells: Map<number, string>;
  entered: number[];
  differs: boolean;
}
export interface HistoryGroup {
  pg: string;
  desc: string;
  rows: HistoryRow[];
  firstDivergence?: number;
}
export interface History {
  groups: HistoryGroup[];
  without: number[];
}

/** What the command asks for (the harness takes 1 to 64). */
export const HISTORY_N = 16;
/** The harness's own cap (HISTORY_MAX); anything longer is not its answer. */
const MAX_ROWS = 64;
const MAX_GROUPS = 64;
export const NOT_REACHED = '-';

const ranks = (v: unknown): number[] =>
  Array.isArray(v) ? [...new Set(v.map(nat).filter((r): r is number => r !== undefined))].sort((a, b) => a - b) : [];

function parseRow(v: unknown): HistoryRow | undefined {
  if (typeof v !== 'object' || v === null) return undefined;
  const r = v as Record<string, unknown>;
  const seq = nat(r.seq);
  if (seq === undefined || typeof r.cells !== 'object' || r.cells === null) return undefined;
  const cells = new Map<number, string>();
  for (const [k, c] of Object.entries(r.cells as Record<string, unknown>)) {
    const rank = /^\d{1,7}$/.test(k) ? Number(k) : undefined;
    const text = oneLine(c, 120);
    if (rank !== undefined && text !== undefined) cells.set(rank, text);
  }
  return { seq, cells, entered: ranks(r.entered), differs: r.differs === true };
}

/** The `history` object, or undefined when there is none (no `--history`, an older harness) or it is not one. */
export function parseHistory(v: unknown): History | undefined {
  if (typeof v !== 'object' || v === null || !Array.isArray((v as { groups?: unknown }).groups)) return undefined;
  const h = v as { groups: unknown[]; without?: unknown };
  const groups: HistoryGroup[] = [];
  for (const g of h.groups.slice(0, MAX_GROUPS)) {
    if (typeof g !== 'object' || g === null) continue;
    const o = g as Record<string, unknown>;
    const pg = oneLine(typeof o.pg === 'number' ? String(o.pg) : o.pg, 60);
    if (pg === undefined || !Array.isArray(o.rows)) continue;
    const rows = o.rows
      .slice(-MAX_ROWS)
      .map(parseRow)
      .filter((r): r is HistoryRow => r !== undefined)
      .sort((a, b) => a.seq - b.seq);
    const first = nat(o.first_divergence);
    groups.push({ pg, desc: oneLine(o.desc, 80) ?? '', rows, firstDivergence: rows.some((r) => r.seq === first) ? first : undefined });
  }
  return { groups, without: ranks(h.without) };
}

/** One tree row: label, description, tooltip, screen-reader text; `mark`: the first divergence. */
export interface HistoryItem {
  label: string;
  description: string;
  tooltip: string;
  accessibilityLabel: string;
  mark?: boolean;
}

/** The "Collective history" node itself. */
export function historyItem(h: History, n = HISTORY_N): HistoryItem {
  const parted = h.groups.filter((g) => g.firstDivergence !== undefined);
  const description = parted.length
    ? `ranks part in ${parted.map((g) => groupName(g)).join(', ')}`
    : h.groups.length
      ? 'no divergence'
      : 'no Flight Recorder history';
  return {
    label: 'Collective history',
    description,
    tooltip: `Each rank's last ${n} collectives from torch's Flight Recorder, per process group, aligned by sequence number (* = inside it, not returned; - = not reached).`,
    accessibilityLabel: `collective history, ${description}`,
  };
}

const groupName = (g: HistoryGroup) => `group ${g.pg}${g.desc ? ` (${g.desc})` : ''}`;

/** A process group's child of the history node. */
export function historyGroupItem(g: HistoryGroup): HistoryItem {
  const last = `last ${g.rows.length}`;
  const where = g.firstDivergence !== undefined ? `first divergence at #${g.firstDivergence}` : 'no divergence';
  return {
    label: groupName(g),
    description: `${last} · ${where}`,
    tooltip: `${groupName(g)}: ${last} collectives, ${where} (* = inside it, not returned; - = not reached)`,
    accessibilityLabel: `${groupName(g)}, ${last} collectives, ${where}`,
    mark: g.firstDivergence !== undefined,
  };
}

/**
 * One sequence number: ranks with the same cell (and the same inside-or-not) in one segment, the largest
 * first — "ranks 1-2: BARRIER [] * · rank 0: ALLREDUCE [[577]] Float *"; a row where every rank agrees
 * reads "all: ALLREDUCE [[577]] Float". Ranks with no known cell (older than their kept window) are left out.
 */
export function historyRowItem(g: HistoryGroup, row: HistoryRow): HistoryItem {
  const seg = new Map<string, number[]>();
  for (const [rank, cell] of [...row.cells].sort((a, b) => a[0] - b[0])) {
    const key = `${cell}${row.entered.includes(rank) ? ' *' : ''}`;
    seg.set(key, [...(seg.get(key) ?? []), rank]);
  }
  const parts = [...seg].sort((a, b) => b[1].length - a[1].length || a[1][0] - b[1][0]);
  const first = row.seq === g.firstDivergence;
  const everyone = new Set(g.rows.flatMap((r) => [...r.cells.keys()]));
  const text =
    parts.length === 1 && parts[0][1].length === everyone.size
      ? `all: ${parts[0][0]}`
      : parts.map(([k, rs]) => `${ranksWord(rs)}: ${k}`).join(' · ');
  const spoken = parts.map(([k, rs]) => `${ranksWord(rs)} ${k.replace(/ \*$/, ' (inside it)').replace(/^-$/, 'not reached')}`).join('; ');
  return {
    label: `#${row.seq}  ${text}`,
    description: first ? '← first divergence' : row.differs ? 'differs' : '',
    tooltip: `${groupName(g)}, #${row.seq}${first ? ' (first divergence)' : ''}\n${parts.map(([k, rs]) => `  ${ranksWord(rs)}: ${k}`).join('\n')}`,
    accessibilityLabel: `sequence ${row.seq}${first ? ', first divergence' : row.differs ? ', differs' : ''}: ${spoken}`,
    mark: first,
  };
}

/** The line under the history node for ranks whose recorder gave nothing usable (off, or not plausible). */
export function withoutLine(h: History): string | undefined {
  return h.without.length ? `no Flight Recorder history from ${ranksWord(h.without)}` : undefined;
}
