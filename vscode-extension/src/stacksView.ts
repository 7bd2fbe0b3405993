import * as vscode from 'vscode';
import { Commands, ContextKeys } from './constants';
import { frameRows, groupRow, StackGroup, StacksReport, verdictRow } from './common/stacksModel';

export type StacksNode =
  | { kind: 'verdict'; session: string; culprit?: number }
  | { kind: 'culprit'; session: string; rank: number }
  | { kind: 'group'; group: StackGroup; session: string }
  | { kind: 'frame'; file: string; line: number; label: string; description: string; tooltip: string; departs: boolean }
  | { kind: 'unresponsive'; ranks: number[] };

/**
 * "Rank Stacks" view: the verdict line first (which rank is elsewhere, with "Attach to rank N" under it, one
 * click), then the groups of `rtdebug stacks --json`, largest first; a frame opens its source at the line; a
 * group's inline action attaches to a representative rank.
 */
export class StacksView implements vscode.TreeDataProvider<StacksNode>, vscode.Disposable {
  private changed = new vscode.EventEmitter<void>();
  readonly onDidChangeTreeData = this.changed.event;
  private report: StacksReport | undefined;

  show(report: StacksReport): void {
    this.report = report;
    void vscode.commands.executeCommand('setContext', ContextKeys.hasStacks, true);
    this.changed.fire();
  }

  get current(): StacksReport | undefined { return this.report; }

  getChildren(node?: StacksNode): StacksNode[] {
    const rep = this.report;
    if (!rep) return [];
    if (!node) {
      const out: StacksNode[] = rep.verdict ? [{ kind: 'verdict', session: rep.session_id, culprit: rep.culprit }] : [];
      out.push(...rep.groups.map((group) => ({ kind: 'group' as const, group, session: rep.session_id })));
      if (rep.unresponsive.length) out.push({ kind: 'unresponsive', ranks: rep.unresponsive });
      return out;
    }
    if (node.kind === 'verdict') return node.culprit !== undefined ? [{ kind: 'culprit', session: node.session, rank: node.culprit }] : [];
    if (node.kind === 'group') return frameRows(node.group, rep.groups[0]).map((f) => ({ kind: 'frame' as const, ...f }));
    return [];
  }

  getTreeItem(node: StacksNode): vscode.TreeItem {
    if (node.kind === 'verdict' || node.kind === 'culprit') return this.verdictItem(node);
    if (node.kind === 'group') {
      const r = groupRow(node.group, this.report!.groups[0]);
      const item = new vscode.TreeItem(r.label, vscode.TreeItemCollapsibleState.Expanded);
      item.description = r.description;
      item.tooltip = r.tooltip;
      item.contextValue = 'rtdebugStackGroup';
      item.iconPath = new vscode.ThemeIcon(node.group === this.report!.groups[0] ? 'layers' : 'layers-active');
      item.accessibilityInformation = { label: r.accessibilityLabel, role: 'treeitem' };
      return item;
    }
    if (node.kind === 'frame') {
      const item = new vscode.TreeItem(node.label, vscode.TreeItemCollapsibleState.None);
      item.description = node.description;
      item.tooltip = node.tooltip;
      item.contextValue = 'rtdebugStackFrame';
      item.iconPath = new vscode.ThemeIcon(node.departs ? 'debug-stackframe-focused' : 'debug-stackframe');
      item.command = { command: Commands.openFrame, title: 'Open Frame', arguments: [node.file, node.line] };
      item.accessibilityInformation = { label: `frame ${node.label}, ${node.description}`, role: 'treeitem' };
      return item;
    }
    const item = new vscode.TreeItem(`unresponsive: rank ${node.ranks.join(', ')}`, vscode.TreeItemCollapsibleState.None);
    item.tooltip = 'These ranks did not answer within the timeout (stopped by a signal, or stuck outside Python).';
    item.iconPath = new vscode.ThemeIcon('warning');
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
    item.iconPath = new vscode.ThemeIcon('error', new vscode.ThemeColor('errorForeground'));
    item.contextValue = node.culprit !== undefined ? 'rtdebugStackVerdict.culprit' : 'rtdebugStackVerdict';
    item.accessibilityInformation = { label: v.accessibilityLabel, role: 'treeitem' };
    return item;
  }

  dispose(): void { this.changed.dispose(); }
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
