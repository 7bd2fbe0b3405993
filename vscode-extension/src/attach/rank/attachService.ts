import * as vscode from 'vscode';
import { DEBUGPY_EXTENSION_ID } from '../../common/constants';
import { RankDebugConfig, RankRef, rankEndpoint, toRankDebugConfig } from './attachConfig';
import { attachInfo } from './attachCli';
import { HarnessCommand } from '../../common/harnessCli';
import { AttachDeclinedError, hostPrompt } from './remoteAttach';

/**
 * Starts and tracks the per-rank debug sessions. The attach configuration comes from the harness
 * (`python -m rtdebug attach --json`); `toRankDebugConfig` only picks the session type: stock `debugpy`
 * when the Python Debugger is installed, else our own type served by DebugAdapterServer. Sessions started
 * from the generated debugpy configs are recognised by their endpoint (`byEndpoint`). A rank on another
 * machine, or an unverified entry, is connected only after the user confirms its host (remoteAttach.ts).
 */
export class AttachService implements vscode.Disposable {
  private sessions = new Map<string, vscode.DebugSession>();
  private refs = new Map<string, RankRef>();
  private changed = new vscode.EventEmitter<void>();
  readonly onDidChange = this.changed.event;
  private subs: vscode.Disposable[] = [];
  /** The user's answers to hostPrompt, by its key, for this window's lifetime. */
  private decisions = new Map<string, Promise<boolean>>();

  constructor(
    private harness: () => Promise<HarnessCommand>,
    private byEndpoint: (ep: { host: string; port: number }) => RankRef | undefined = () => undefined,
  ) {
    this.subs.push(
      vscode.debug.onDidStartDebugSession((s) => {
        const ref = this.rankOf(s);
        if (ref) {
          this.sessions.set(key(ref), s);
          this.refs.set(s.id, ref);
          this.changed.fire();
        }
      }),
      vscode.debug.onDidTerminateDebugSession((s) => {
        const ref = this.refs.get(s.id);
        this.refs.delete(s.id);
        if (ref && this.sessions.get(key(ref))?.id === s.id) {
          this.sessions.delete(key(ref));
          this.changed.fire();
        }
      }),
    );
  }

  /** The rank a debug session is attached to: our `rtdebugRank` tag, else its `connect` endpoint. */
  rankOf(s: vscode.DebugSession): RankRef | undefined {
    const known = this.refs.get(s.id);
    if (known) return known;
    const r = s.configuration.rtdebugRank as RankRef | undefined;
    if (r && typeof r.rank === 'number') return r;
    const ep = s.configuration.request === 'attach' ? rankEndpoint(s.configuration) : undefined;
    return ep ? this.byEndpoint(ep) : undefined;
  }

  get attachedCount(): number {
    return this.sessions.size;
  }

  isAttached(session: string, rank: number): boolean {
    return this.sessions.has(key({ session, rank }));
  }

  sessionFor(k: RankRef): vscode.DebugSession | undefined {
    return this.sessions.get(key(k));
  }

  /** Ranks of `session` (every session when undefined) that have a debug session in this window. */
  attachedRanks(session?: string): RankRef[] {
    return [...this.sessions.keys()].map(parseKey).filter((k) => session === undefined || k.session === session);
  }

  useDebugpy(): boolean {
    return !!vscode.extensions.getExtension(DEBUGPY_EXTENSION_ID);
  }

  /**
   * The debug configuration for one rank, once its host is confirmed where it has to be; throws
   * AttachDeclinedError when the user does not. `rememberDecline`: an "all ranks" session does not ask
   * again about a host the user declined (its ranks are retried every second); an explicit attach does.
   */
  async configFor(session: string | undefined, rank: number, rememberDecline = false): Promise<RankDebugConfig> {
    const info = await attachInfo(await this.harness(), rank, session);
    const p = hostPrompt(info);
    if (p) {
      let d = this.decisions.get(p.key);
      if (d && !rememberDecline && !(await d)) d = undefined;
      if (!d) {
        d = Promise.resolve(vscode.window.showWarningMessage(p.message, { modal: true, detail: p.detail }, p.confirm)).then(
          (c) => c === p.confirm,
        );
        this.decisions.set(p.key, d);
      }
      if (!(await d)) throw new AttachDeclinedError(p.declined);
    }
    return toRankDebugConfig(info, this.useDebugpy());
  }

  /** Attach one rank; with a parent, the child is shown under it in the Call Stack view. */
  async attach(session: string | undefined, rank: number, parent?: vscode.DebugSession): Promise<void> {
    const config = await this.configFor(session, rank, !!parent);
    if (this.isAttached(config.rtdebugRank.session, rank)) return;
    const folder = parent?.workspaceFolder ?? vscode.workspace.workspaceFolders?.[0];
    const ok = await vscode.debug.startDebugging(
      folder,
      config,
      parent ? { parentSession: parent, compact: false, lifecycleManagedByParent: false } : undefined,
    );
    if (!ok) throw new Error(`VS Code did not start the debug session for rank ${rank}`);
  }

  /** Detach from one rank: the rank keeps running (debugpy accepts a new client later). */
  async detach(k: RankRef): Promise<void> {
    const s = this.sessions.get(key(k));
    if (s) await end(s, false);
  }

  /** Ends the rank sessions under `parent` (all of them when undefined). */
  async detachChildren(parent: vscode.DebugSession | undefined, terminateDebuggee: boolean): Promise<void> {
    const children = [...this.sessions.values()].filter((s) => !parent || s.parentSession?.id === parent.id);
    await Promise.all(children.map((s) => end(s, terminateDebuggee)));
  }

  dispose(): void {
    this.subs.forEach((d) => d.dispose());
    this.changed.dispose();
  }
}

async function end(s: vscode.DebugSession, terminateDebuggee: boolean): Promise<void> {
  try {
    await s.customRequest('disconnect', { terminateDebuggee });
  } catch {
    /* adapter already gone */
  }
  try {
    await vscode.debug.stopDebugging(s);
  } catch {
    /* already stopped */
  }
}

function key(r: RankRef): string {
  return `${r.session}/${r.rank}`;
}

function parseKey(k: string): RankRef {
  const i = k.lastIndexOf('/');
  return { session: k.slice(0, i), rank: Number(k.slice(i + 1)) };
}
