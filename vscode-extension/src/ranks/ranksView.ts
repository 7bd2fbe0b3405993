import * as vscode from 'vscode';
import { RankDebugStates } from '../attach/allstop/rankDebugState';
import { Row } from './ranksTree';
import { GROUP_AUTO, GroupBy } from './rankGroups';
import { RanksModel, RanksNode } from './ranksModel';
import { LIVE_ROWS_MS } from '../common/constants';
import { AttachService } from '../attach/rank/attachService';
import { RegistryWatcher } from '../registry/registryWatcher';

export type { RanksNode } from './ranksModel';

/** Changes that arrive together (1024 ranks stopping, a registry poll) make one update. */
export const RENDER_COALESCE_MS = 50;
const GROUP_BY_KEY = 'rtdebug.ranks.groupBy';

/**
 * The "Ranks" view (Run and Debug container): sessions → (mesh groups →) ranks, live from the registry
 * watcher and this window's debug sessions. The nodes and rows are ranksModel.ts's; this file hands VS Code
 * only the nodes an update changed (the whole tree only when sessions come or go), groups collapsed.
 */
export class RanksView implements vscode.TreeDataProvider<RanksNode>, vscode.Disposable {
  private changed = new vscode.EventEmitter<RanksNode | RanksNode[] | undefined>();
  readonly onDidChangeTreeData = this.changed.event;
  private subs: vscode.Disposable[];
  private timer: NodeJS.Timeout;
  private pending: NodeJS.Timeout | undefined;
  private model = new RanksModel();
  private by: GroupBy;

  constructor(
    private registry: RegistryWatcher,
    private states: RankDebugStates,
    private attached: AttachService,
    private memento?: vscode.Memento,
  ) {
    this.by = memento?.get<string>(GROUP_BY_KEY) ?? GROUP_AUTO;
    const later = () => this.later();
    this.subs = [registry.onDidChange(later), attached.onDidChange(later), states.onDidChange(later)];
    // time left before the pg timeout, and how long a rank has waited in a collective: only while one is paused or waiting
    this.timer = setInterval(() => {
      if (this.ticking()) this.later();
    }, LIVE_ROWS_MS);
    this.render();
  }

  get groupBy(): GroupBy {
    return this.by;
  }

  set groupBy(by: GroupBy) {
    this.by = by;
    void this.memento?.update(GROUP_BY_KEY, by);
    this.render();
  }

  private ticking(): boolean {
    return (
      this.states.keys().some((k) => this.states.get(k)?.state === 'stopped') ||
      this.registry.sessions.some((s) => s.ranks.some((r) => r.collective?.state === 'entered'))
    );
  }

  private later(): void {
    if (!this.pending) this.pending = setTimeout(() => this.render(), RENDER_COALESCE_MS);
  }

  /** Rebuild the rows and tell VS Code what changed; returns the change (for tests and the benchmark). */
  render(): ReturnType<RanksModel['update']> {
    clearTimeout(this.pending);
    this.pending = undefined;
    const c = this.model.update({
      sessions: this.registry.sessions,
      // A session of ours that has not stopped yet has no tracked state: it is attached and running.
      dbg: (session, rank) =>
        this.states.get({ session, rank }) ?? (this.attached.isAttached(session, rank) ? { state: 'running' as const } : undefined),
      nowMs: Date.now(),
      groupBy: this.by,
    });
    if (c.root) this.changed.fire(undefined);
    else if (c.nodes.length) this.changed.fire(c.nodes);
    return c;
  }

  getChildren(node?: RanksNode): RanksNode[] {
    return this.model.children(node);
  }

  getTreeItem(node: RanksNode): vscode.TreeItem {
    const row = this.model.row(node);
    const state =
      node.kind === 'session'
        ? vscode.TreeItemCollapsibleState.Expanded
        : node.kind === 'group'
          ? vscode.TreeItemCollapsibleState.Collapsed
          : vscode.TreeItemCollapsibleState.None;
    return row ? toItem(row, state) : new vscode.TreeItem('(gone)');
  }

  /** A rank's tooltip lists every peer's collective: built on hover, not for every row on every update. */
  resolveTreeItem(item: vscode.TreeItem, node: RanksNode): vscode.TreeItem {
    item.tooltip = this.model.tooltip(node);
    return item;
  }

  getParent(node: RanksNode): RanksNode | undefined {
    return this.model.parent(node);
  }

  dispose(): void {
    clearInterval(this.timer);
    clearTimeout(this.pending);
    this.subs.forEach((d) => d.dispose());
    this.changed.dispose();
  }
}

function toItem(r: Row, collapsible: vscode.TreeItemCollapsibleState): vscode.TreeItem {
  const item = new vscode.TreeItem(r.label, collapsible);
  item.id = r.id;
  item.description = r.description;
  if (r.tooltip) item.tooltip = r.tooltip;
  item.contextValue = r.contextValue;
  item.iconPath = new vscode.ThemeIcon(r.icon, r.color ? new vscode.ThemeColor(r.color) : undefined);
  item.accessibilityInformation = { label: r.accessibilityLabel, role: 'treeitem' };
  return item;
}
