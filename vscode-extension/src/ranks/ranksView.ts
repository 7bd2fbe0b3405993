import * as vscode from 'vscode';
import { RankDebugStates } from '../attach/rankDebugState';
import { rankRow, Row, sessionLive, sessionRow } from './ranksTree';
import { LIVE_ROWS_MS } from '../common/constants';
import { RankEntry, Session } from '../registry/registryModel';
import { AttachService } from '../attach/attachService';
import { RegistryWatcher } from '../registry/registryWatcher';

/** A node of the Ranks view; commands from its inline actions receive it. */
export type RanksNode = { kind: 'session'; session: Session } | { kind: 'rank'; session: Session; rank: RankEntry };

/**
 * The "Ranks" view (Run and Debug container): sessions → ranks, live from the registry watcher and this
 * window's debug sessions. Rows come from the pure builders in ranksTree.ts.
 */
export class RanksView implements vscode.TreeDataProvider<RanksNode>, vscode.Disposable {
  private changed = new vscode.EventEmitter<void>();
  readonly onDidChangeTreeData = this.changed.event;
  private subs: vscode.Disposable[];
  private timer: NodeJS.Timeout;

  constructor(
    private registry: RegistryWatcher,
    private states: RankDebugStates,
    private attached: AttachService,
  ) {
    const fire = () => this.changed.fire();
    this.subs = [registry.onDidChange(fire), attached.onDidChange(fire), states.onDidChange(fire)];
    // time left before the pg timeout, and how long a rank has waited in a collective: only while one is paused or waiting
    this.timer = setInterval(() => {
      if (this.ticking()) fire();
    }, LIVE_ROWS_MS);
  }

  private ticking(): boolean {
    return (
      this.states.keys().some((k) => this.states.get(k)?.state === 'stopped') ||
      this.registry.sessions.some((s) => s.ranks.some((r) => r.collective?.state === 'entered'))
    );
  }

  getChildren(node?: RanksNode): RanksNode[] {
    if (!node) return this.registry.sessions.map((session) => ({ kind: 'session' as const, session }));
    if (node.kind === 'session') return node.session.ranks.map((rank) => ({ kind: 'rank' as const, session: node.session, rank }));
    return [];
  }

  getTreeItem(node: RanksNode): vscode.TreeItem {
    const sid = node.session.entry.session_id;
    if (node.kind === 'session') {
      const live = sessionLive(node.session, (rank) => this.states.get({ session: sid, rank }), Date.now());
      return toItem(sessionRow(node.session, live), vscode.TreeItemCollapsibleState.Expanded);
    }
    const k = { session: node.session.entry.session_id, rank: node.rank.rank };
    // A session of ours that has not stopped yet has no tracked state: it is attached and running.
    const dbg = this.states.get(k) ?? (this.attached.isAttached(k.session, k.rank) ? { state: 'running' as const } : undefined);
    return toItem(rankRow(node.session, node.rank, dbg), vscode.TreeItemCollapsibleState.None);
  }

  getParent(node: RanksNode): RanksNode | undefined {
    return node.kind === 'rank' ? { kind: 'session', session: node.session } : undefined;
  }

  dispose(): void {
    clearInterval(this.timer);
    this.subs.forEach((d) => d.dispose());
    this.changed.dispose();
  }
}

function toItem(r: Row, collapsible: vscode.TreeItemCollapsibleState): vscode.TreeItem {
  const item = new vscode.TreeItem(r.label, collapsible);
  item.id = r.id;
  item.description = r.description;
  item.tooltip = r.tooltip;
  item.contextValue = r.contextValue;
  item.iconPath = new vscode.ThemeIcon(r.icon, r.color ? new vscode.ThemeColor(r.color) : undefined);
  item.accessibilityInformation = { label: r.accessibilityLabel, role: 'treeitem' };
  return item;
}
