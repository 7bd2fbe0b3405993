import * as vscode from 'vscode';
import { Gated, Views } from '../common/constants';
import { runHarness } from '../common/harnessCli';
import { AttachDeclinedError } from '../attach/rank/remoteAttach';
import { HISTORY_N } from '../stacks/stacksHistory';
import { takeStacks } from '../stacks/stacksReport';
import { AttachService } from '../attach/rank/attachService';
import { AllStopController } from '../attach/allstop/allStopController';
import { currentHarness } from '../common/harnessCommand';
import { RanksNode } from './ranksView';
import { RegistryWatcher } from '../registry/registryWatcher';
import { StacksNode, StacksView } from '../stacks/stacksView';
import { ensureTrusted } from '../common/workspaceTrust';

/**
 * The Ranks view's actions and the session-wide commands: Attach / Detach a rank, Stop Session,
 * Show Stacks of All Ranks, Pause All Ranks, Continue All Ranks. Each takes a view node when invoked from
 * the view, else asks (or takes the only candidate). Those that run the CLI (attach, stop, stacks) check
 * workspace trust first, before asking anything; Pause/Continue only talk DAP to attached ranks.
 */
export class RankCommands {
  constructor(
    private attach: AttachService,
    private registry: RegistryWatcher,
    private stacks: StacksView,
    private allStop: AllStopController,
    private log: vscode.OutputChannel,
  ) {}

  async attachRank(node?: RanksNode): Promise<void> {
    if (node?.kind !== 'rank') return void vscode.commands.executeCommand('rtdebug.attachToRank');
    if (!ensureTrusted(Gated.attach)) return;
    this.log.appendLine(`rtdebug: attaching to rank ${node.rank.rank} of ${node.session.entry.session_id} (Ranks view)`);
    await guard(() => this.attach.attach(node.session.entry.session_id, node.rank.rank), this.log);
  }

  async detachRank(node?: RanksNode): Promise<void> {
    if (node?.kind !== 'rank') return;
    await guard(() => this.attach.detach({ session: node.session.entry.session_id, rank: node.rank.rank }), this.log);
  }

  async stopSession(node?: RanksNode): Promise<void> {
    if (!ensureTrusted(Gated.stop)) return;
    const id = node?.session.entry.session_id ?? (await this.pickSession('stop'));
    if (!id) return;
    await guard(async () => {
      const out = await runHarness(await currentHarness(Gated.stop), ['stop', '--session', id], 90000);
      void vscode.window.showInformationMessage(`rtdebug: ${out.trim().split('\n').pop() || `session ${id} stopped`}`);
      this.registry.refresh();
    }, this.log);
  }

  /**
   * `rtdebug stacks --session ID [--rank N] --history 16 --json`, shown in the Rank Stacks view (a harness
   * from before `--history` is asked again without it: stacks/stacksReport.ts takeStacks).
   */
  async showStacks(node?: RanksNode): Promise<void> {
    if (!ensureTrusted(Gated.stacks)) return;
    const id = node?.session.entry.session_id ?? (await this.pickSession('show the stacks of'));
    if (!id) return;
    await guard(async () => {
      const harness = await currentHarness(Gated.stacks);
      const rank = node?.kind === 'rank' ? node.rank.rank : undefined;
      const rep = await takeStacks((args) => runHarness(harness, args, 60000), id, rank, HISTORY_N);
      this.stacks.show(rep);
      await vscode.commands.executeCommand(`${Views.stacks}.focus`);
    }, this.log);
  }

  async attachGroup(node?: StacksNode): Promise<void> {
    if (node?.kind !== 'group' || !ensureTrusted(Gated.attach)) return;
    await guard(() => this.attach.attach(node.session, node.group.ranks[0]), this.log);
  }

  /** The verdict's "Attach to rank N" (its row, or the verdict row's inline action). */
  async attachCulprit(node?: StacksNode): Promise<void> {
    if (node?.kind !== 'culprit' && node?.kind !== 'verdict') return;
    const rank = node.kind === 'culprit' ? node.rank : node.culprit;
    if (rank === undefined || !ensureTrusted(Gated.attach)) return;
    this.log.appendLine(`rtdebug: attaching to rank ${rank} of ${node.session} (the stacks' verdict names it)`);
    await guard(() => this.attach.attach(node.session, rank), this.log);
  }

  async pauseAll(node?: RanksNode): Promise<void> {
    const id = node?.session.entry.session_id ?? (await this.pickSession('pause', true));
    if (!id) return;
    const asked = this.allStop.allStop.pauseOthers(id, undefined, 'Pause All Ranks');
    if (!asked.length) void vscode.window.showInformationMessage(`rtdebug: no running attached rank in ${id} to pause.`);
  }

  async continueAll(node?: RanksNode): Promise<void> {
    const id = node?.session.entry.session_id ?? (await this.pickSession('continue', true));
    if (!id) return;
    const asked = this.allStop.allStop.continueAll(id);
    if (!asked.length) void vscode.window.showInformationMessage(`rtdebug: no stopped rank in ${id} to continue.`);
  }

  /** The only candidate session, or the user's pick; `attachedOnly`: sessions with ranks attached here. */
  async pickSession(what: string, attachedOnly = false): Promise<string | undefined> {
    const ids = attachedOnly
      ? [...new Set(this.attach.attachedRanks().map((k) => k.session))]
      : this.registry.refresh().map((s) => s.entry.session_id);
    if (!ids.length) {
      void vscode.window.showWarningMessage(
        attachedOnly ? 'rtdebug: no rank is attached in this window.' : 'rtdebug: no live rtdebug session.',
      );
      return undefined;
    }
    if (ids.length === 1) return ids[0];
    return await vscode.window.showQuickPick(ids, { title: `rtdebug: ${what} which session?` });
  }
}

export async function guard(f: () => Promise<void>, log?: vscode.OutputChannel): Promise<void> {
  try {
    await f();
  } catch (e) {
    log?.appendLine(`rtdebug: ${(e as Error).message}`);
    if (e instanceof AttachDeclinedError) return; // the user's own answer: logged, not shown back
    void vscode.window.showErrorMessage(`rtdebug: ${(e as Error).message}`);
  }
}
