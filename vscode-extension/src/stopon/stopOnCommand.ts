import * as vscode from 'vscode';
import { AllStop } from '../attach/allStop';
import { AttachService } from '../attach/attachService';
import { RankDebugStates } from '../attach/rankDebugState';
import { evaluateInRank } from '../attach/rankEvaluate';
import { RankCommands } from '../ranks/rankCommands';
import { RanksNode } from '../ranks/ranksView';
import { RegistryWatcher } from '../registry/registryWatcher';
import { AnswersMessage, answersMessage } from './stopOnAnswers';
import { configureExpression, parseStopOn, stopOnProblem, stopOnText } from './stopOnSpec';

interface CondItem extends vscode.QuickPickItem {
  cond: 'nonfinite' | 'nonfinite:deep' | 'disagree' | 'step' | 'off';
}

const CONDITIONS: CondItem[] = [
  { cond: 'nonfinite', label: 'nonfinite', detail: 'a NaN or Inf in the loss or in a DDP gradient bucket; names the rank where it began' },
  {
    cond: 'nonfinite:deep',
    label: 'nonfinite:deep',
    detail: 'the same, and names the first module whose output went non-finite (one sync per module)',
  },
  {
    cond: 'disagree',
    label: 'disagree:N',
    detail: 'every N optimizer steps the DDP replicas compare a hash of their parameters (asks for N)',
  },
  { cond: 'step', label: 'step=N', detail: 'before optimizer step N, counting the steps taken from 0 (asks for N)' },
  { cond: 'off', label: 'off', detail: 'stop on nothing (alone)' },
];

/**
 * "Stop All Ranks When…" (issue 30): `--stop-on` conditions set on a running job, on every rank attached in
 * this window, through its debug session: each rank evaluates the harness's `arm.configure('<spec>')`
 * (paused for it if it runs, and continued after: attach/rankEvaluate.ts) and answers one line; the
 * answers are shown as one message (stopOnAnswers.ts). The spec is checked first with the CLI's grammar
 * and words (stopOnSpec.ts). args (keybindings, tests): a Ranks view node, or { session?, spec? }.
 */
export class StopOnCommand {
  constructor(
    private attach: AttachService,
    private states: RankDebugStates,
    private allStop: AllStop,
    private registry: RegistryWatcher,
    private ranks: RankCommands,
    private log: vscode.OutputChannel,
  ) {}

  async run(arg?: RanksNode | { session?: string; spec?: string }): Promise<AnswersMessage | undefined> {
    const node = arg && 'kind' in arg ? arg : undefined;
    const opts = arg && !('kind' in arg) ? arg : {};
    const session = node?.session.entry.session_id ?? opts.session ?? (await this.ranks.pickSession('set --stop-on in', true));
    if (!session) return undefined;
    const keys = this.attach.attachedRanks(session).sort((a, b) => a.rank - b.rank);
    if (!keys.length) {
      void vscode.window.showWarningMessage(`rtdebug: no rank of ${session} is attached in this window; Attach to All Ranks first.`);
      return undefined;
    }
    const spec = opts.spec ?? (await this.ask());
    if (spec === undefined) return undefined;
    let canonical: string;
    try {
      canonical = stopOnText(parseStopOn(spec));
    } catch (e) {
      void vscode.window.showErrorMessage(`rtdebug: ${(e as Error).message}`);
      return undefined;
    }
    const expression = configureExpression(canonical);
    this.log.appendLine(
      `rtdebug: Stop All Ranks When: ${canonical || 'off'} in rank(s) ${keys.map((k) => k.rank).join(', ')} of ${session}`,
    );
    const request = (k: { session: string; rank: number }, command: string, args: Record<string, unknown>) => {
      const s = this.attach.sessionFor(k);
      if (!s) throw new Error('its debug session ended');
      return Promise.resolve(s.customRequest(command, args));
    };
    const answers = await Promise.all(
      keys.map(async (k) => {
        const r = await evaluateInRank(this.states, this.allStop, { request }, k, expression);
        this.log.appendLine(`rtdebug: rank ${k.rank}: ${r.value ?? `not set (${r.error})`}${r.paused ? ' (paused for it)' : ''}`);
        return { rank: k.rank, result: r.value, error: r.error };
      }),
    );
    const attached = new Set(keys.map((k) => k.rank));
    const all = this.registry.sessions.find((s) => s.entry.session_id === session)?.ranks ?? [];
    const msg = answersMessage(
      answers,
      all.map((r) => r.rank).filter((r) => !attached.has(r)),
    );
    if (msg.level === 'info') void vscode.window.showInformationMessage(msg.text);
    else if (msg.level === 'warning') void vscode.window.showWarningMessage(msg.text);
    else void vscode.window.showErrorMessage(msg.text);
    return msg;
  }

  /** The conditions: a multi-select quick pick, then N for disagree and step (checked as the CLI checks it). */
  private async ask(): Promise<string | undefined> {
    const picked = await vscode.window.showQuickPick(CONDITIONS, {
      title: 'rtdebug: stop every rank when…',
      placeHolder: 'pick one or more conditions (the ranks stop at the same step, before the optimizer changes the weights)',
      canPickMany: true,
      ignoreFocusOut: true,
    });
    if (!picked?.length) return undefined;
    if (picked.some((p) => p.cond === 'off')) return '';
    const parts: string[] = [];
    for (const p of picked) {
      if (p.cond === 'nonfinite' || p.cond === 'nonfinite:deep') parts.push(p.cond);
      else if (p.cond !== 'off') {
        const n = await this.askN(p.cond);
        if (n === undefined) return undefined;
        parts.push(p.cond === 'disagree' ? `disagree:${n}` : `step=${n}`);
      }
    }
    return parts.join(',');
  }

  private async askN(cond: 'disagree' | 'step'): Promise<string | undefined> {
    const spec = (v: string) => (cond === 'disagree' ? `disagree:${v.trim()}` : `step=${v.trim()}`);
    const n = await vscode.window.showInputBox({
      title: cond === 'disagree' ? 'rtdebug: compare the replicas every N optimizer steps' : 'rtdebug: stop before optimizer step N',
      prompt: cond === 'disagree' ? 'N (at least 1; default 100)' : 'N: the optimizer steps taken so far count from 0',
      value: cond === 'disagree' ? '100' : '',
      ignoreFocusOut: true,
      validateInput: (v) => (v.trim() ? stopOnProblem(spec(v)) : 'a number'),
    });
    return n?.trim() || undefined;
  }
}
