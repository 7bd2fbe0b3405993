import * as vscode from 'vscode';
import { BLOCKED_AFTER_MS, Gated } from '../../common/constants';
import { RankRef } from '../rank/attachConfig';
import { AllStop, RankControl } from './allStop';
import { JobAllStop } from './jobAllStop';
import { JobEntries } from './continuePlan';
import { runHarness } from '../../common/harnessCli';
import { RankDebugStates } from './rankDebugState';
import { parseStacks } from '../../stacks/stacksReport';
import { AttachService } from '../rank/attachService';
import { currentHarness } from '../../common/harnessCommand';
import { readSettings } from '../../common/settings';

/**
 * Binds the extension's side of all-stop to VS Code debug sessions (DAP `threads` / `pause` / `continue` /
 * `evaluate` through customRequest): the rank states and explicit actions (allStop.ts; Continue All Ranks reads the
 * job's entries, continuePlan.ts), the `rtdebug.allStop`
 * setting handed to the jobs (jobAllStop.ts: on a rank's attach, and when the setting changes), and, for a
 * rank whose pause has not landed after BLOCKED_AFTER_MS (blocked in a C++ collective), `rtdebug stacks
 * --session ID --rank N --json` asked where it is, for the Ranks view.
 */
export class AllStopController implements vscode.Disposable {
  readonly allStop: AllStop;
  readonly job: JobAllStop;
  private timer: NodeJS.Timeout;
  private subs: vscode.Disposable[] = [];

  constructor(
    private attach: AttachService,
    private states: RankDebugStates,
    private log: vscode.OutputChannel,
    jobSays: (session: string) => boolean | undefined = () => undefined,
    /** Whether the rank's entry says the ranks' all-stop is pausing it (`debug.state` `pausing`). */
    private entryPausing: (k: RankRef) => boolean = () => false,
    /** What the job's rank entries say now (a fresh read): Continue All Ranks' plan (continuePlan.ts). */
    job: (session: string) => JobEntries | undefined = () => undefined,
  ) {
    const ctl: RankControl = {
      pause: (k) => this.pause(k),
      resume: (k, threadId) => this.resume(k, threadId),
      attached: (session) => this.attach.attachedRanks(session),
      job,
      log: (line) => this.log.appendLine(line),
    };
    this.allStop = new AllStop(states, ctl);
    this.job = new JobAllStop(
      {
        request: async (k, command, args) => this.session(k).customRequest(command, args),
        attached: (session) => this.attach.attachedRanks(session),
        jobSays,
        log: (line) => this.log.appendLine(line),
      },
      () => readSettings().allStop,
    );
    this.subs.push(
      vscode.workspace.onDidChangeConfiguration((e) => {
        if (e.affectsConfiguration('rtdebug.allStop')) void this.job.changed();
      }),
    );
    this.timer = setInterval(() => this.checkBlocked(), 500);
  }

  private session(k: RankRef): vscode.DebugSession {
    const s = this.attach.sessionFor(k);
    if (!s) throw new Error(`rank ${k.rank} of ${k.session} has no debug session`);
    return s;
  }

  /** The main thread (debugpy pauses every thread of the process when asked for one). */
  private async mainThread(s: vscode.DebugSession): Promise<number> {
    const r = await s.customRequest('threads');
    const threads = (r?.threads ?? []) as { id: number; name: string }[];
    if (!threads.length) throw new Error('no threads');
    return (threads.find((t) => t.name === 'MainThread') ?? threads[0]).id;
  }

  private async pause(k: RankRef): Promise<void> {
    const s = this.session(k);
    await s.customRequest('pause', { threadId: await this.mainThread(s) });
  }

  private async resume(k: RankRef, threadId: number | undefined): Promise<void> {
    const s = this.session(k);
    await s.customRequest('continue', { threadId: threadId ?? (await this.mainThread(s)) });
  }

  private checkBlocked(): void {
    for (const k of this.attach.attachedRanks()) this.allStop.followEntry(k, this.entryPausing(k));
    for (const k of this.allStop.overdue(BLOCKED_AFTER_MS)) {
      this.states.update(k, { blockedNote: 'asking where it is…' });
      void this.whereIs(k);
    }
  }

  private async whereIs(k: RankRef): Promise<void> {
    let patch;
    try {
      const rep = parseStacks(
        await runHarness(
          await currentHarness(Gated.blocked),
          ['stacks', '--session', k.session, '--rank', String(k.rank), '--json'],
          20000,
        ),
      );
      const top = rep.groups.find((g) => g.ranks.includes(k.rank))?.frames[0];
      patch = top
        ? { blockedAt: { file: top.file, line: top.line, function: top.function }, blockedNote: undefined }
        : { blockedNote: rep.unresponsive.includes(k.rank) ? 'its stack did not answer' : 'no stack reported' };
    } catch (e) {
      patch = { blockedNote: `no stack (${(e as Error).message.split('\n')[0].slice(0, 100)})` };
    }
    if (this.states.get(k)?.state === 'pausing') this.states.update(k, patch);
  }

  dispose(): void {
    clearInterval(this.timer);
    this.subs.forEach((d) => d.dispose());
  }
}
