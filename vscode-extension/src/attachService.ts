import * as vscode from 'vscode';
import { DEBUGPY_EXTENSION_ID } from './constants';
import { RankDebugConfig, RankRef, toRankDebugConfig } from './common/attachConfig';
import { attachInfo, HarnessCommand } from './common/harnessCli';

/**
 * Starts and tracks the per-rank debug sessions. The attach configuration comes from the harness
 * (`python -m harness attach --json`); `toRankDebugConfig` only picks the session type: stock `debugpy`
 * when the Python Debugger is installed, else our own type served by DebugAdapterServer.
 */
export class AttachService implements vscode.Disposable {
  private sessions = new Map<string, vscode.DebugSession>();
  private changed = new vscode.EventEmitter<void>();
  readonly onDidChange = this.changed.event;
  private subs: vscode.Disposable[] = [];

  constructor(private harness: () => Promise<HarnessCommand>) {
    this.subs.push(
      vscode.debug.onDidStartDebugSession((s) => {
        const ref = rankRef(s);
        if (ref) { this.sessions.set(key(ref), s); this.changed.fire(); }
      }),
      vscode.debug.onDidTerminateDebugSession((s) => {
        const ref = rankRef(s);
        if (ref && this.sessions.get(key(ref))?.id === s.id) { this.sessions.delete(key(ref)); this.changed.fire(); }
      }),
    );
  }

  get attachedCount(): number { return this.sessions.size; }

  isAttached(session: string, rank: number): boolean { return this.sessions.has(key({ session, rank })); }

  useDebugpy(): boolean { return !!vscode.extensions.getExtension(DEBUGPY_EXTENSION_ID); }

  async configFor(session: string | undefined, rank: number): Promise<RankDebugConfig> {
    return toRankDebugConfig(await attachInfo(await this.harness(), rank, session), this.useDebugpy());
  }

  /** Attach one rank; with a parent, the child is shown under it in the Call Stack view. */
  async attach(session: string | undefined, rank: number, parent?: vscode.DebugSession): Promise<void> {
    const config = await this.configFor(session, rank);
    if (this.isAttached(config.rtdebugRank.session, rank)) return;
    const folder = parent?.workspaceFolder ?? vscode.workspace.workspaceFolders?.[0];
    const ok = await vscode.debug.startDebugging(folder, config, parent ? { parentSession: parent, compact: false, lifecycleManagedByParent: false } : undefined);
    if (!ok) throw new Error(`VS Code did not start the debug session for rank ${rank}`);
  }

  /** Ends the rank sessions under `parent` (all of them when undefined). */
  async detachChildren(parent: vscode.DebugSession | undefined, terminateDebuggee: boolean): Promise<void> {
    const children = [...this.sessions.values()].filter((s) => !parent || s.parentSession?.id === parent.id);
    await Promise.all(children.map(async (s) => {
      try { await s.customRequest('disconnect', { terminateDebuggee }); } catch { /* adapter already gone */ }
      try { await vscode.debug.stopDebugging(s); } catch { /* already stopped */ }
    }));
  }

  dispose(): void { this.subs.forEach((d) => d.dispose()); this.changed.dispose(); }
}

function key(r: RankRef): string { return `${r.session}/${r.rank}`; }

function rankRef(s: vscode.DebugSession): RankRef | undefined {
  const r = s.configuration.rtdebugRank as RankRef | undefined;
  return r && typeof r.rank === 'number' ? r : undefined;
}
