import * as vscode from 'vscode';
import { REGISTRY_POLL_MS } from './constants';
import { registryDir } from './common/registryPaths';
import { findSession, readRegistry } from './common/registryReader';
import { Session } from './common/registryModel';
import { readSettings } from './settings';

/** Polls the registry directory (cheap: a few small files) and fires when the live ranks change. */
export class RegistryWatcher implements vscode.Disposable {
  private timer: NodeJS.Timeout;
  private last = '';
  private current: Session[] = [];
  private changed = new vscode.EventEmitter<Session[]>();
  readonly onDidChange = this.changed.event;

  constructor(pollMs = REGISTRY_POLL_MS) {
    this.timer = setInterval(() => this.refresh(), pollMs);
    this.refresh();
  }

  get dir(): string { return registryDir(process.env, undefined, readSettings().registryDir); }

  refresh(): Session[] {
    this.current = readRegistry(this.dir).sessions;
    const sig = JSON.stringify(this.current.map((s) => [s.entry.session_id, s.ranks.map((r) => [r.rank, r.pid, r.state])]));
    if (sig !== this.last) { this.last = sig; this.changed.fire(this.current); }
    return this.current;
  }

  get sessions(): Session[] { return this.current; }

  /** A fresh read (not the last poll) of one session, or of the newest when `id` is empty. */
  find(id?: string): Session | undefined { return findSession(this.refresh(), id); }

  dispose(): void { clearInterval(this.timer); this.changed.dispose(); }
}
