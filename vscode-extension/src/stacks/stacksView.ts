import * as vscode from 'vscode';
import { Commands, ContextKeys } from '../common/constants';
import { flightNoteRow, frameRows, groupRow, stacksRoots, verdictRow } from './stacksModel';
import { StackGroup, StacksReport } from './stacksReport';
import { HistoryGroup, historyGroupItem, HistoryItem, historyItem, HistoryRow, historyRowItem, withoutLine } from './stacksHistory';

export type StacksNode =
  | { kind: 'verdict'; session: string; culprit?: number }
  | { kind: 'culprit'; session: string; rank: number }
  | { kind: 'note' }
  | { kind: 'group'; group: StackGroup; session: string }
  | { kind: 'frame'; file: string; line: number; label: string; description: string; tooltip: string; departs: boolean }
  | { kind: 'unresponsive'; ranks: number[] }
  | { kind: 'history' }
  | { kind: 'historyGroup'; group: HistoryGroup }
  | { kind: 'historyRow'; group: HistoryGroup; row: HistoryRow }
  | { kind: 'historyWithout'; text: string };

/**
 * "Rank Stacks" view: the verdict line first (which rank is elsewhere, with "Attach to rank N" under it, one
 * click), then the Flight Recorder note when it is off somewhere, then the groups of `rtdebug stacks --json`,
 * largest first (a rank whose stack is the signal-time fallback dump marked on its group); a frame opens its
 * source at the line; a group's inline action attaches to a representative rank. Last, "Collective history"
 * (`--history`): one child per process group, one row per sequence number, the first divergence marked.
 * The rows' words come from stacksModel.ts and stacksHistory.ts (pure, unit-tested).
 */
export class StacksView implements vscode.TreeDataProvider<StacksNode>, vscode.Disposable {
  private changed = new vscode.EventEmitter<void>();
  readonly onDidChangeTreeData = this.changed.event;
  private report: StacksReport | undefined;
  /** Bumped per report: the history nodes' ids carry it (see historyTreeItem). */
  private seq = 0;

  show(report: StacksReport): void {
    this.report = report;
    this.seq++;
    void vscode.commands.executeCommand('setContext', ContextKeys.hasStacks, true);
    this.changed.fire();
  }

  get current(): StacksReport | undefined {
    return this.report;
  }

  getChildren(node?: StacksNode): StacksNode[] {
    const rep = this.report;
    if (!rep) return [];
    if (!node) {
      return stacksRoots(rep).map((r): StacksNode => {
        if (r.kind === 'verdict') return { kind: 'verdict', session: rep.session_id, culprit: rep.culprit };
        if (r.kind === 'group') return { kind: 'group', group: r.group, session: rep.session_id };
        if (r.kind === 'unresponsive') return { kind: 'unresponsive', ranks: rep.unresponsive };
        return r;
      });
    }
    if (node.kind === 'verdict') return node.culprit !== undefined ? [{ kind: 'culprit', session: node.session, rank: node.culprit }] : [];
    if (node.kind === 'group') return frameRows(node.group, rep.groups[0]).map((f) => ({ kind: 'frame' as const, ...f }));
    if (node.kind === 'history' && rep.history) {
      const without = withoutLine(rep.history);
      return [
        ...rep.history.groups.map((group) => ({ kind: 'historyGroup' as const, group })),
        ...(without ? [{ kind: 'historyWithout' as const, text: without }] : []),
      ];
    }
    if (node.kind === 'historyGroup') return node.group.rows.map((row) => ({ kind: 'historyRow' as const, group: node.group, row }));
    return [];
  }

  getTreeItem(node: StacksNode): vscode.TreeItem {
    switch (node.kind) {
      case 'verdict':
      case 'culprit':
        return this.verdictItem(node);
      case 'note': {
        const n = flightNoteRow(this.report!)!;
        return leaf(n.label, n.tooltip, n.accessibilityLabel, new vscode.ThemeIcon('info'));
      }
      case 'group':
        return this.groupItem(node.group);
      case 'frame': {
        const item = leaf(
          node.label,
          node.tooltip,
          `frame ${node.label}, ${node.description}`,
          new vscode.ThemeIcon(node.departs ? 'debug-stackframe-focused' : 'debug-stackframe'),
        );
        item.description = node.description;
        item.contextValue = 'rtdebugStackFrame';
        item.command = { command: Commands.openFrame, title: 'Open Frame', arguments: [node.file, node.line] };
        return item;
      }
      case 'unresponsive':
        return leaf(
          `unresponsive: rank ${node.ranks.join(', ')}`,
          'These ranks did not answer within the timeout (stopped by a signal, or stuck outside Python).',
          `unresponsive: rank ${node.ranks.join(', ')}`,
          new vscode.ThemeIcon('warning'),
        );
      case 'history':
        return historyTreeItem(
          historyItem(this.report!.history!),
          vscode.TreeItemCollapsibleState.Expanded,
          'history',
          undefined,
          `${this.seq}`,
        );
      case 'historyGroup': {
        const r = historyGroupItem(node.group);
        // the group where the ranks part opens by itself; the others stay folded
        return historyTreeItem(
          r,
          r.mark ? vscode.TreeItemCollapsibleState.Expanded : vscode.TreeItemCollapsibleState.Collapsed,
          r.mark ? 'git-compare' : 'list-ordered',
          undefined,
          `${this.seq}/${r.label}`,
        );
      }
      case 'historyRow': {
        const r = historyRowItem(node.group, node.row);
        return historyTreeItem(
          r,
          vscode.TreeItemCollapsibleState.None,
          r.mark ? 'arrow-right' : node.row.differs ? 'diff' : 'blank',
          r.mark ? new vscode.ThemeColor('errorForeground') : undefined,
        );
      }
      case 'historyWithout':
        return leaf(node.text, `${node.text}: its Flight Recorder is off or gave nothing usable.`, node.text, new vscode.ThemeIcon('info'));
    }
  }

  private groupItem(group: StackGroup): vscode.TreeItem {
    const rep = this.report!;
    const r = groupRow(group, rep.groups[0], rep.fallback, rep.collectivesFrom);
    const item = new vscode.TreeItem(r.label, vscode.TreeItemCollapsibleState.Expanded);
    item.description = r.description;
    item.tooltip = r.tooltip;
    item.contextValue = 'rtdebugStackGroup';
    item.iconPath = new vscode.ThemeIcon(r.fallback ? 'warning' : group === rep.groups[0] ? 'layers' : 'layers-active');
    item.accessibilityInformation = { label: r.accessibilityLabel, role: 'treeitem' };
    return item;
  }

  private verdictItem(node: Extract<StacksNode, { kind: 'verdict' | 'culprit' }>): vscode.TreeItem {
    const v = verdictRow(this.report!)!;
    if (node.kind === 'culprit') {
      const item = new vscode.TreeItem(v.attachLabel ?? `Attach to rank ${node.rank}`, vscode.TreeItemCollapsibleState.None);
      item.iconPath = new vscode.ThemeIcon('debug-alt');
      item.contextValue = 'rtdebugStackCulprit';
      item.command = { command: Commands.attachCulprit, title: item.label as string, arguments: [node] };
      item.accessibilityInformation = { label: `attach to rank ${node.rank}`, role: 'button' };
      return item;
    }
    const item = new vscode.TreeItem(v.label, vscode.TreeItemCollapsibleState.Expanded);
    item.tooltip = v.tooltip;
    item.iconPath = v.progress ? new vscode.ThemeIcon('pulse') : new vscode.ThemeIcon('error', new vscode.ThemeColor('errorForeground'));
    item.contextValue = node.culprit !== undefined ? 'rtdebugStackVerdict.culprit' : 'rtdebugStackVerdict';
    item.accessibilityInformation = { label: v.accessibilityLabel, role: 'treeitem' };
    return item;
  }

  dispose(): void {
    this.changed.dispose();
  }
}

function leaf(label: string, tooltip: string, spoken: string, icon: vscode.ThemeIcon): vscode.TreeItem {
  const item = new vscode.TreeItem(label, vscode.TreeItemCollapsibleState.None);
  item.tooltip = tooltip;
  item.iconPath = icon;
  item.accessibilityInformation = { label: spoken, role: 'treeitem' };
  return item;
}

/**
 * `report`: an id of this report's own for the history node and its groups. Without one VS Code names a
 * row by its label and place, so a group of an earlier report (folded, no divergence there) kept this
 * report's same-named group folded, its first divergence out of sight (seen in the e2e).
 */
function historyTreeItem(
  r: HistoryItem,
  state: vscode.TreeItemCollapsibleState,
  icon: string,
  color?: vscode.ThemeColor,
  report?: string,
): vscode.TreeItem {
  const item = new vscode.TreeItem(r.label, state);
  if (report !== undefined) item.id = `rtdebug-history:${report}`;
  item.description = r.description;
  item.tooltip = r.tooltip;
  item.iconPath = new vscode.ThemeIcon(icon, color);
  item.contextValue = r.mark ? 'rtdebugHistory.divergence' : 'rtdebugHistory';
  item.accessibilityInformation = { label: r.accessibilityLabel, role: 'treeitem' };
  return item;
}

/** Opens a frame's source at its line (the file as the rank saw it; must exist on this machine). */
export async function openFrame(file: string, line: number): Promise<void> {
  const pos = new vscode.Position(Math.max(0, line - 1), 0);
  try {
    await vscode.window.showTextDocument(vscode.Uri.file(file), { selection: new vscode.Range(pos, pos), preview: true });
  } catch (e) {
    void vscode.window.showErrorMessage(`rtdebug: cannot open ${file}:${line}: ${(e as Error).message}`);
  }
}
