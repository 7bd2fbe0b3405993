import { RankDebugInfo } from '../attach/allstop/rankDebugState';
import { GroupBy, groupDim, groupId, groupRanks, groupRow, RankGroup } from './rankGroups';
import { PositionWatch } from './positionWatch';
import { rankRow, rankTooltip, rankViewState, Row, sessionLive, sessionRow } from './ranksTree';
import { RankEntry, Session } from '../registry/registryModel';

/**
 * The Ranks view's nodes and rows, kept between updates so that an update says only what changed (issue
 * 31: a 1024-rank job). Each node is one object for its whole life (VS Code finds the element it is told
 * to refresh by identity), updated in place; each update rebuilds every row (cheap: no tooltips) and
 * compares it with the last one, so one rank's new state refreshes that rank's row and its group's, not
 * the tree. A parent whose children changed is refreshed as a whole; a rank that moved between groups
 * refreshes its session (VS Code must not see one id under two parents at once). Pure: ranksView.ts
 * hands the answers to VS Code.
 */
export type RanksNode =
  | { kind: 'session'; session: Session }
  | { kind: 'group'; session: Session; group: RankGroup }
  | { kind: 'rank'; session: Session; rank: RankEntry };

export interface ModelInput {
  sessions: Session[];
  /** What this window's debugger says of a rank (a rank attached here but never stopped: running). */
  dbg(session: string, rank: number): RankDebugInfo | undefined;
  nowMs: number;
  groupBy: GroupBy;
}

/** `root`: refresh everything (sessions came or went); else refresh these nodes (none of them inside another). */
export interface ModelChange {
  root: boolean;
  nodes: RanksNode[];
}

interface Slot {
  node: RanksNode;
  row: Row;
  sig: string;
  parent?: string;
  kids?: string[];
}

export class RanksModel {
  private slots = new Map<string, Slot>();
  private roots: string[] = [];
  private input: ModelInput | undefined;
  /** the hang badge needs positions that stood still across polls */
  private watch = new PositionWatch();

  update(input: ModelInput): ModelChange {
    this.input = input;
    const next = new Map<string, Slot>();
    const changed = new Set<string>();
    const put = (id: string, fresh: RanksNode, row: Row, parent?: string, kids?: string[]) => {
      const old = this.slots.get(id);
      const node = old ? Object.assign(old.node, fresh) : fresh;
      const slot: Slot = { node, row, sig: JSON.stringify(row), parent, kids };
      next.set(id, slot);
      if (!old) return; // a new node is shown by refreshing its parent, whose children changed
      if (old.sig !== slot.sig) changed.add(id);
      if (kids && old.kids?.join('\n') !== kids.join('\n')) changed.add(id);
      if (old.parent !== parent && fresh.kind === 'rank') changed.add(`session:${fresh.session.entry.session_id}`);
    };
    for (const s of input.sessions) {
      const sid = s.entry.session_id;
      const sessionId = `session:${sid}`;
      const dbg = (rank: number) => input.dbg(sid, rank);
      const moving = this.watch.moving(sid, s.ranks, input.nowMs);
      const rankIds = new Map<number, string>();
      const states = new Map<number, ReturnType<typeof rankViewState>['state']>();
      const dim = groupDim(s, input.groupBy);
      const groups = dim ? groupRanks(s, dim) : undefined;
      const parentOf = new Map<number, string>();
      for (const g of groups ?? []) for (const r of g.ranks) parentOf.set(r.rank, groupId(sid, g));
      for (const r of s.ranks) {
        const row = rankRow(s, r, dbg(r.rank), input.nowMs, false);
        rankIds.set(r.rank, row.id);
        states.set(r.rank, rankViewState(r, dbg(r.rank)).state);
        put(row.id, { kind: 'rank', session: s, rank: r }, row, parentOf.get(r.rank) ?? sessionId);
      }
      for (const g of groups ?? []) {
        const row = groupRow(
          s,
          g,
          g.ranks.map((r) => states.get(r.rank)!),
          moving,
        );
        put(
          row.id,
          { kind: 'group', session: s, group: g },
          row,
          sessionId,
          g.ranks.map((r) => rankIds.get(r.rank)!),
        );
      }
      const kids = groups ? groups.map((g) => groupId(sid, g)) : s.ranks.map((r) => rankIds.get(r.rank)!);
      put(sessionId, { kind: 'session', session: s }, sessionRow(s, sessionLive(s, dbg, input.nowMs, moving)), undefined, kids);
    }
    this.watch.keep(new Set(input.sessions.map((s) => s.entry.session_id)));
    const roots = input.sessions.map((s) => `session:${s.entry.session_id}`);
    const root = roots.join('\n') !== this.roots.join('\n');
    this.slots = next;
    this.roots = roots;
    if (root) return { root: true, nodes: [] };
    // a node inside another refreshed one is refreshed with it
    const inside = (id: string) => {
      for (let p = next.get(id)?.parent; p; p = next.get(p)?.parent) if (changed.has(p)) return true;
      return false;
    };
    return { root: false, nodes: [...changed].filter((id) => next.has(id) && !inside(id)).map((id) => next.get(id)!.node) };
  }

  children(node?: RanksNode): RanksNode[] {
    const ids = node ? (this.slots.get(this.idOf(node))?.kids ?? []) : this.roots;
    return ids.map((id) => this.slots.get(id)!.node);
  }

  parent(node: RanksNode): RanksNode | undefined {
    const p = this.slots.get(this.idOf(node))?.parent;
    return p ? this.slots.get(p)?.node : undefined;
  }

  row(node: RanksNode): Row | undefined {
    return this.slots.get(this.idOf(node))?.row;
  }

  /** A rank's tooltip (every peer's collective), built when it is hovered; the others' are in their rows. */
  tooltip(node: RanksNode): string | undefined {
    if (node.kind !== 'rank' || !this.input) return this.row(node)?.tooltip;
    const sid = node.session.entry.session_id;
    return rankTooltip(node.session, node.rank, this.input.dbg(sid, node.rank.rank), this.input.nowMs);
  }

  /** Every node, for tests and the benchmark. */
  get size(): number {
    return this.slots.size;
  }

  private idOf(node: RanksNode): string {
    const sid = node.session.entry.session_id;
    if (node.kind === 'session') return `session:${sid}`;
    if (node.kind === 'group') return groupId(sid, node.group);
    return `rank:${sid}/${node.rank.rank}`;
  }
}
