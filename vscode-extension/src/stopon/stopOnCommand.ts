import * as vscode from 'vscode';
import { AllStop } from '../attach/allstop/allStop';
import { AttachService } from '../attach/rank/attachService';
import { RankDebugStates } from '../attach/allstop/rankDebugState';
import { evaluateInAll } from '../attach/allstop/rankEvaluate';
import { ranksWord } from '../common/rankList';
import { RankCommands } from '../ranks/rankCommands';
import { RanksNode } from '../ranks/ranksView';
import { RegistryWatcher } from '../registry/registryWatcher';
import { Gated } from '../common/constants';
import { CheckRun, checkStopOn, checkWith, refusal } from '../common/harnessCheck';
import { currentHarness } from '../common/harnessCommand';
import { AnswersMessage, answersMessage, configureExpression, mustTurnOff, turnedOff } from './stopOnAnswers';

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
 * "Stop All Ranks When…" (issue 30): `--stop-on` conditions set on a running job, in every rank, through
 * its debug session: each evaluates the harness's `arm.configure('<spec>')` and answers one line; the
 * answers are shown as one message (stopOnAnswers.ts). Every rank, and all at one moment
 * (attach/allstop/rankEvaluate.ts evaluateInAll: the running ones paused together, then continued together): an
 * armed rank joins one vote per step, so ranks armed at different steps, or some not at all, would wait in
 * different collectives for good; for the same reason a rank that does not take it is turned off again in
 * the others. The spec is checked first by the CLI (`rtdebug check --stop-on`: its grammar, its words). args
 * (keybindings, tests): a Ranks view node, or { session?, spec? }.
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
    const attached = new Set(keys.map((k) => k.rank));
    const missing = (this.registry.sessions.find((s) => s.entry.session_id === session)?.ranks ?? [])
      .map((r) => r.rank)
      .filter((r) => !attached.has(r));
    if (!keys.length || missing.length) {
      void vscode.window.showWarningMessage(
        `rtdebug: --stop-on is set in every rank of a job at once (each armed rank joins one vote per step), and ${keys.length ? `${ranksWord(missing)} of ${session} ${missing.length === 1 ? 'is' : 'are'}` : `no rank of ${session} is`} not attached in this window; Attach to All Ranks first.`,
      );
      return undefined;
    }
    let check: CheckRun;
    try {
      check = checkWith(await currentHarness(Gated.stopOn));
    } catch (e) {
      void vscode.window.showErrorMessage(`rtdebug: ${(e as Error).message}`);
      return undefined;
    }
    const spec = opts.spec ?? (await this.ask(check));
    if (spec === undefined) return undefined;
    let canonical: string;
    try {
      const c = await checkStopOn(check, spec);
      if (!c.valid) throw new Error(c.error);
      canonical = c.stop_on;
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
    const all = await evaluateInAll(this.states, this.allStop, { request }, keys, expression);
    if (!all.ok) {
      this.log.appendLine(`rtdebug: Stop All Ranks When: nothing was set: ${all.error}`);
      void vscode.window.showErrorMessage(`rtdebug: --stop-on was not set (no rank changed): ${all.error}`);
      return { text: all.error, level: 'error', ok: [] };
    }
    const answers = keys.map((k) => ({ rank: k.rank, result: all.results.get(k.rank)?.value, error: all.results.get(k.rank)?.error }));
    for (const a of answers) this.log.appendLine(`rtdebug: rank ${a.rank}: ${a.result ?? `not set (${a.error})`}`);
    let msg = answersMessage(answers);
    if (mustTurnOff(canonical, msg, keys.length)) {
      const off = await evaluateInAll(
        this.states,
        this.allStop,
        { request },
        keys.filter((k) => msg.ok.includes(k.rank)),
        configureExpression(''),
      );
      msg = turnedOff(msg, off.ok ? undefined : off.error);
    }
    if (msg.level === 'info') void vscode.window.showInformationMessage(msg.text);
    else if (msg.level === 'warning') void vscode.window.showWarningMessage(msg.text);
    else void vscode.window.showErrorMessage(msg.text);
    return msg;
  }

  /** The conditions: a multi-select quick pick, then N for disagree and step (checked by the CLI while typing). */
  private async ask(check: CheckRun): Promise<string | undefined> {
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
        const n = await this.askN(p.cond, check);
        if (n === undefined) return undefined;
        parts.push(p.cond === 'disagree' ? `disagree:${n}` : `step=${n}`);
      }
    }
    return parts.join(',');
  }

  private async askN(cond: 'disagree' | 'step', check: CheckRun): Promise<string | undefined> {
    const spec = (v: string) => (cond === 'disagree' ? `disagree:${v.trim()}` : `step=${v.trim()}`);
    const n = await vscode.window.showInputBox({
      title: cond === 'disagree' ? 'rtdebug: compare the replicas every N optimizer steps' : 'rtdebug: stop before optimizer step N',
      prompt: cond === 'disagree' ? 'N (at least 1; default 100)' : 'N: the optimizer steps taken so far count from 0',
      value: cond === 'disagree' ? '100' : '',
      ignoreFocusOut: true,
      validateInput: (v) => (v.trim() ? refusal(checkStopOn(check, spec(v))) : 'a number'),
    });
    return n?.trim() || undefined;
  }
}
