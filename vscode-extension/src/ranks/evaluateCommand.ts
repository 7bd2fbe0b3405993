import * as vscode from 'vscode';
import { EVAL_SCHEME } from '../common/constants';
import { EvalRow, evaluateMarkdown } from './evaluateTable';
import { RankDebugStates } from '../attach/allstop/rankDebugState';
import { basename } from '../common/fileName';
import { AttachService } from '../attach/rank/attachService';
import { RankCommands } from './rankCommands';
import { RanksNode } from './ranksView';

/** Read-only documents holding the evaluate tables (`rtdebug-eval:` URIs), shown as a Markdown preview. */
export class EvalDocuments implements vscode.TextDocumentContentProvider {
  private docs = new Map<string, string>();
  private n = 0;
  private changed = new vscode.EventEmitter<vscode.Uri>();
  readonly onDidChange = this.changed.event;

  add(text: string): vscode.Uri {
    const uri = vscode.Uri.from({ scheme: EVAL_SCHEME, path: `/evaluate-${++this.n}.md` });
    this.docs.set(uri.toString(), text);
    return uri;
  }

  provideTextDocumentContent(uri: vscode.Uri): string {
    return this.docs.get(uri.toString()) ?? '';
  }
}

/**
 * "Evaluate in All Ranks": one expression in the top frame of the stopped thread of every stopped rank
 * of a session (DAP `stackTrace`, then `evaluate` with context "repl"), as a rank → value table with the
 * values that differ from the majority marked. Returns the rows (for keybindings and tests).
 */
export class EvaluateCommand {
  private last = '';

  constructor(
    private attach: AttachService,
    private states: RankDebugStates,
    private docs: EvalDocuments,
    private ranks: RankCommands,
  ) {}

  async run(arg?: RanksNode | { session?: string; expression?: string }): Promise<EvalRow[] | undefined> {
    const node = arg && 'kind' in arg ? arg : undefined;
    const opts = arg && !('kind' in arg) ? arg : {};
    const session = node?.session.entry.session_id ?? opts.session ?? (await this.ranks.pickSession('evaluate in', true));
    if (!session) return undefined;
    const keys = this.attach.attachedRanks(session).sort((a, b) => a.rank - b.rank);
    const stopped = keys.filter((k) => this.states.get(k)?.state === 'stopped');
    if (!stopped.length) {
      void vscode.window.showWarningMessage(`rtdebug: no rank of ${session} is stopped; Pause All Ranks first.`);
      return undefined;
    }
    const expression =
      opts.expression ??
      (await vscode.window.showInputBox({
        title: `rtdebug: evaluate in all ${stopped.length} stopped rank(s) of ${session}`,
        prompt: 'Expression to evaluate in the current frame of every stopped rank',
        value: this.last || selectedText(),
        ignoreFocusOut: true,
      }));
    if (!expression?.trim()) return undefined;
    this.last = expression;
    const rows = await Promise.all(stopped.map((k) => this.evaluateOne(k, expression)));
    const skipped = keys.filter((k) => !stopped.includes(k)).map((k) => k.rank);
    const uri = this.docs.add(evaluateMarkdown(expression, session, rows, skipped));
    const doc = await vscode.workspace.openTextDocument(uri);
    try {
      await vscode.commands.executeCommand('markdown.showPreview', uri);
    } catch {
      await vscode.window.showTextDocument(doc, { preview: true });
    }
    return rows;
  }

  private async evaluateOne(k: { session: string; rank: number }, expression: string): Promise<EvalRow> {
    const s = this.attach.sessionFor(k);
    const info = this.states.get(k);
    if (!s || info?.threadId === undefined) return { rank: k.rank, error: 'no stopped thread' };
    try {
      const st = await s.customRequest('stackTrace', { threadId: info.threadId, startFrame: 0, levels: 1 });
      const f = st?.stackFrames?.[0];
      if (!f) return { rank: k.rank, error: 'no frame' };
      const where = `${f.name} (${basename(String(f.source?.path ?? f.source?.name ?? '?'))}:${f.line})`;
      try {
        const ev = await s.customRequest('evaluate', { expression, frameId: f.id, context: 'repl' });
        return { rank: k.rank, value: String(ev?.result ?? ''), where };
      } catch (e) {
        return { rank: k.rank, error: (e as Error).message, where };
      }
    } catch (e) {
      return { rank: k.rank, error: (e as Error).message };
    }
  }
}

function selectedText(): string {
  const e = vscode.window.activeTextEditor;
  return e && !e.selection.isEmpty ? e.document.getText(e.selection) : '';
}
