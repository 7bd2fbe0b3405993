import { compressRanks } from '../common/rankList';
import { collectiveSummary } from './collectiveText';
import { RankViewState, Row } from './ranksTree';
import { dimsOf, coordsOf } from '../registry/meshes';
import { RankEntry, Session } from '../registry/registryModel';

/**
 * The Ranks view grouped by one mesh dimension (issue 31): a session's ranks under one node per coordinate
 * (`dp=0`, `dp=1`, …), each saying how many ranks are in which state and where their collectives are, so a
 * 1024-rank job reads as a handful of rows until a group is opened. Pure.
 */

/** 'auto': the first dim of the session's first mesh; 'none': the flat list; else that dim, where the session has it. */
export type GroupBy = string;
export const GROUP_AUTO = 'auto';
export const GROUP_NONE = 'none';

export function groupDim(s: Session, groupBy: GroupBy): string | undefined {
  if (groupBy === GROUP_NONE) return undefined;
  const dims = dimsOf(s.ranks);
  if (groupBy === GROUP_AUTO) return dims.keys().next().value;
  return dims.has(groupBy) ? groupBy : undefined;
}

export interface RankGroup {
  dim: string;
  /** undefined: the ranks that have no coordinate in `dim` (no mesh yet, or a mesh without it) */
  value?: number;
  ranks: RankEntry[];
}

/** The session's ranks by their coordinate in `dim`, in coordinate order; ranks without one come last. */
export function groupRanks(s: Session, dim: string): RankGroup[] {
  const by = new Map<number | undefined, RankEntry[]>();
  for (const r of s.ranks) {
    const v = coordsOf(r).get(dim);
    by.set(v, [...(by.get(v) ?? []), r]);
  }
  return [...by]
    .sort(([a], [b]) => (a ?? Infinity) - (b ?? Infinity))
    .map(([value, ranks]) => ({ dim, value, ranks: ranks.sort((x, y) => x.rank - y.rank) }));
}

export const groupId = (sid: string, g: { dim: string; value?: number }): string => `group:${sid}/${g.dim}=${g.value ?? '-'}`;

// the order states are counted in: the usual ones first, what needs a look last
const ORDER: RankViewState[] = ['ready', 'attached', 'waiting', 'starting', 'stopped', 'blocked', 'failed', 'orphaned'];
// a rank held by --stop-on reads as stopped in a count
const COUNTED: Partial<Record<RankViewState, RankViewState>> = { halted: 'stopped' };

/** `4 ready, 1 stopped`: how many of the group's ranks are in each state. */
export function stateSummary(states: RankViewState[]): string {
  const n = new Map<RankViewState, number>();
  for (const st of states) n.set(COUNTED[st] ?? st, (n.get(COUNTED[st] ?? st) ?? 0) + 1);
  return ORDER.filter((st) => n.get(st))
    .map((st) => `${n.get(st)} ${st}`)
    .join(', ');
}

/** The group's row; `states`: each of its ranks' view state (as their rows show them). */
export function groupRow(s: Session, g: RankGroup, states: RankViewState[], moving?: ReadonlySet<number>): Row {
  const sid = s.entry.session_id;
  const label = g.value === undefined ? `no ${g.dim} coordinate` : `${g.dim}=${g.value}`;
  const summary = stateSummary(states);
  const coll = collectiveSummary(g.ranks, moving);
  const n = `${g.ranks.length} rank${g.ranks.length === 1 ? '' : 's'}`;
  const trouble = states.some((st) => st === 'failed' || st === 'blocked' || st === 'orphaned') || coll?.differ;
  const stopped = states.some((st) => st === 'stopped' || st === 'halted');
  const desc = g.ranks[0]?.meshes?.flatMap((m) => m.descs?.[m.dims.indexOf(g.dim)] ?? []).find((d) => d);
  return {
    id: groupId(sid, g),
    label,
    description: [n, summary, coll?.text].filter((x) => x).join(' · '),
    tooltip: [
      `${label}: ranks ${compressRanks(g.ranks.map((r) => r.rank))} of session ${sid}${desc ? ` (process group ${desc})` : ''}`,
      `states: ${summary}`,
      ...(coll ? [coll.text] : []),
    ].join('\n'),
    contextValue: 'rtdebugRankGroup',
    icon: trouble ? 'warning' : stopped ? 'debug-pause' : 'symbol-array',
    color: trouble ? 'charts.orange' : undefined,
    accessibilityLabel: `${label}, ${n}, ${summary}${coll ? `, ${coll.text}` : ''}`,
  };
}

export interface GroupByItem {
  label: string;
  description: string;
  value: GroupBy;
  picked: boolean;
}

/** "Group Ranks By…": the default, every dimension the live sessions' meshes name (with its size), none. */
export function groupByItems(sessions: Session[], current: GroupBy): GroupByItem[] {
  const sizes = dimsOf(sessions.flatMap((s) => s.ranks));
  const mark = (v: GroupBy) => (v === current ? ' (current)' : '');
  return [
    {
      label: 'default',
      description: `the first dimension of the first mesh${mark(GROUP_AUTO)}`,
      value: GROUP_AUTO,
      picked: current === GROUP_AUTO,
    },
    ...[...sizes].map(([d, n]) => ({
      label: d,
      description: `${n} group${n === 1 ? '' : 's'}: ${d}=0${n > 1 ? ` … ${d}=${n - 1}` : ''}${mark(d)}`,
      value: d,
      picked: current === d,
    })),
    { label: 'none', description: `every rank in one flat list${mark(GROUP_NONE)}`, value: GROUP_NONE, picked: current === GROUP_NONE },
  ];
}
