import * as vscode from 'vscode';
import { RankRef } from '../rank/attachConfig';
import { AllStop } from '../allstop/allStop';
import { RankDebugStates } from '../allstop/rankDebugState';
import { AttachService } from '../rank/attachService';
import { focusRankSession } from '../allstop/focusSession';
import { StopOnFocus } from '../allstop/stopFocus';

const STEPS = new Set(['next', 'stepIn', 'stepOut', 'stepBack', 'reverseContinue', 'goto']);

interface DapMessage {
  type: string;
  command?: string;
  success?: boolean;
  event?: string;
  body?: Record<string, unknown>;
  arguments?: Record<string, unknown>;
}

/**
 * A debug-adapter tracker on every rank session (ours, or a generated `debugpy` one recognised by its
 * endpoint): `stopped` / `continued` events and the `continue` requests VS Code sends feed the rank states
 * (the Ranks view's "stopped at file:line"); a successful `attach` response hands the job the all-stop setting. A `--stop-on` stop (its
 * description `rtdebug --stop-on …`) focuses the rank where it began (stopFocus.ts decides which).
 */
export class RankTrackerFactory implements vscode.DebugAdapterTrackerFactory {
  private focus = new StopOnFocus();

  constructor(
    private attach: AttachService,
    private states: RankDebugStates,
    private allStop: AllStop,
    private log: (line: string) => void = () => undefined,
    /** A rank's `attach` succeeded, in `session` (jobAllStop.ts hands it the all-stop setting). */
    private attached: (k: RankRef, session: vscode.DebugSession) => void = () => undefined,
  ) {}

  createDebugAdapterTracker(session: vscode.DebugSession): vscode.DebugAdapterTracker {
    const ref = (): RankRef | undefined => this.attach.rankOf(session);
    const gone = () => {
      const k = ref();
      if (!k) return;
      this.states.delete(k);
      this.focus.resumed(k.session, k.rank);
    };
    return {
      onWillReceiveMessage: (m: DapMessage) => {
        if (m.type !== 'request') return;
        const k = ref();
        if (!k) return;
        if (m.command === 'continue') this.allStop.continued(k);
        else if (m.command && STEPS.has(m.command)) this.allStop.stepping(k);
        if (m.command === 'continue' || (m.command && STEPS.has(m.command))) this.focus.resumed(k.session, k.rank);
      },
      onDidSendMessage: (m: DapMessage) => {
        if (m.type === 'response' && m.command === 'attach' && m.success) {
          const a = ref();
          if (a) this.attached(a, session);
        }
        if (m.type !== 'event') return;
        const k = ref();
        if (!k) return;
        if (m.event === 'stopped') {
          const threadId = typeof m.body?.threadId === 'number' ? m.body.threadId : undefined;
          const description = typeof m.body?.description === 'string' ? m.body.description : undefined;
          this.allStop.stopped(k, String(m.body?.reason ?? 'unknown'), threadId, undefined, description);
          void this.locate(session, k, threadId);
          const hint = typeof m.body?.preserveFocusHint === 'boolean' ? m.body.preserveFocusHint : undefined;
          if (this.focus.stopped(k.session, { rank: k.rank, description, preserveFocusHint: hint }) !== undefined)
            void focusRankSession(session, this.log);
        } else if (m.event === 'continued') {
          this.allStop.continued(k);
          this.focus.resumed(k.session, k.rank);
        } else if (m.event === 'terminated' || m.event === 'exited') gone();
      },
      onExit: gone,
      onWillStopSession: gone,
    };
  }

  /** Where the rank stopped (top frame of the stopped thread), for the view. */
  private async locate(session: vscode.DebugSession, k: RankRef, threadId: number | undefined): Promise<void> {
    if (threadId === undefined) return;
    try {
      const st = await session.customRequest('stackTrace', { threadId, startFrame: 0, levels: 1 });
      const f = st?.stackFrames?.[0];
      const file = f?.source?.path ?? f?.source?.name;
      if (file && this.states.get(k)?.state === 'stopped')
        this.states.update(k, { where: { file: String(file), line: Number(f.line), function: f.name } });
    } catch {
      /* the rank resumed or went away meanwhile */
    }
  }
}
