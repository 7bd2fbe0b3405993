import * as vscode from 'vscode';
import { POSITIONS_DEBOUNCE_MS } from '../common/constants';
import { CollectiveStepping } from './collectiveStepping';
import { RankDebugStates, RankKey } from '../attach/allstop/rankDebugState';
import { AllStopController } from '../attach/allstop/allStopController';
import { AttachService } from '../attach/rank/attachService';
import { RankCommands } from '../ranks/rankCommands';
import { RanksNode } from '../ranks/ranksView';
import { RegistryWatcher } from '../registry/registryWatcher';

/**
 * "Step All Ranks" and "Run All Ranks to Next Collective", bound to this window's rank debug sessions
 * (customRequest). The logic is in
 * collectiveStepping.ts; this file only wires it and talks to the user. When ranks stop, their
 * positions are re-read (`ps --json`, debounced) so the Ranks view shows each rank's op and sequence number.
 */
export class CollectiveCommands implements vscode.Disposable {
  readonly stepping: CollectiveStepping;
  private refreshTimer: NodeJS.Timeout | undefined;
  private stoppedSig = '';
  private sub: vscode.Disposable;

  constructor(
    private attach: AttachService,
    private states: RankDebugStates,
    allStop: AllStopController,
    private registry: RegistryWatcher,
    private ranks: RankCommands,
    private log: vscode.OutputChannel,
  ) {
    this.stepping = new CollectiveStepping(states, allStop.allStop, {
      attached: (s) => attach.attachedRanks(s),
      request: async (k, command, args) => this.session(k).customRequest(command, args),
      log: (l) => log.appendLine(l),
    });
    this.sub = states.onDidChange(() => this.positionsLater());
  }

  private session(k: RankKey): vscode.DebugSession {
    const s = this.attach.sessionFor(k);
    if (!s) throw new Error(`rank ${k.rank} of ${k.session} has no debug session`);
    return s;
  }

  /** Re-read the positions once the set of stopped ranks has settled (after a step, a run to a collective). */
  private positionsLater(): void {
    const sig = this.states
      .keys()
      .filter((k) => this.states.get(k)?.state === 'stopped')
      .map((k) => `${k.session}/${k.rank}@${this.states.get(k)?.stoppedAt}`)
      .join(',');
    if (sig === this.stoppedSig) return;
    this.stoppedSig = sig;
    clearTimeout(this.refreshTimer);
    this.refreshTimer = setTimeout(() => void this.registry.pollCli(), POSITIONS_DEBOUNCE_MS);
  }

  async stepAll(node?: RanksNode): Promise<number[] | undefined> {
    const id = node?.session.entry.session_id ?? (await this.ranks.pickSession('step every stopped rank of', true));
    if (!id) return undefined;
    const stepped = await this.stepping.stepAll(id);
    if (!stepped.length) void vscode.window.showWarningMessage(`rtdebug: no rank of ${id} is stopped; Pause All Ranks first.`);
    else this.log.appendLine(`rtdebug: Step All Ranks: stepping rank(s) ${stepped.join(', ')} of ${id}`);
    return stepped;
  }

  async runToNextCollective(node?: RanksNode): Promise<number[] | undefined> {
    const id = node?.session.entry.session_id ?? (await this.ranks.pickSession('run to the next collective', true));
    if (!id) return undefined;
    const r = await this.stepping.runToNextCollective(id);
    if (!r.armed.length && !r.failed.length) {
      void vscode.window.showWarningMessage(`rtdebug: no rank of ${id} is stopped; Pause All Ranks first.`);
      return undefined;
    }
    if (r.failed.length) {
      const f = r.failed[0];
      void vscode.window.showErrorMessage(
        `rtdebug: Run to Next Collective: rank ${f.rank} could not be armed (${f.error}); nothing was continued.`,
      );
      return undefined;
    }
    this.log.appendLine(
      `rtdebug: Run All Ranks to Next Collective: armed rank(s) ${r.armed.join(', ')}; continued ${r.continued.join(', ')}`,
    );
    vscode.window.setStatusBarMessage(`$(debug-continue) rtdebug: ${r.armed.length} rank(s) run to their next collective`, 5000);
    return r.armed;
  }

  dispose(): void {
    clearTimeout(this.refreshTimer);
    this.sub.dispose();
  }
}
