import * as vscode from 'vscode';
import { CLI_POLL_MS, Gated, REGISTRY_POLL_MS } from '../common/constants';
import { runHarness } from '../common/harnessCli';
import { cliPoll, CliRankSource, mergeSessions } from './rankSource';
import { registryDir } from './registryPaths';
import { findSession, NewProblems, readRegistry } from './registryReader';
import { Session } from './registryModel';
import { untrustedMessage } from '../common/trustGate';
import { currentHarness } from '../common/harnessCommand';
import { readSettings } from '../common/settings';
import { workspaceTrusted } from '../common/workspaceTrust';

/**
 * The live sessions and ranks, for the view, the status bar and the commands. This machine's registry
 * files are polled every second (a few small files); when `rtdebug.listing` asks for it (or a cluster
 * listing is configured: RAY_ADDRESS / RTDEBUG_STORE), `rtdebug ps --json` is polled too, less often, and
 * its sessions and remote ranks are merged in — in a trusted workspace only (common/trustGate.ts): an
 * untrusted one lists the files alone. Fires when what a user would see changes.
 *
 * Why the files are read here and not through `ps --json` alone: an untrusted workspace runs no Python at
 * all, yet the Ranks view lists this machine's sessions there; and the poll runs every second for as long
 * as VS Code is open, where `ps --json` is a Python process each time — about 0.1 s of CPU with no job and
 * 0.3 s at 1024 ranks, against 35-90 ms for this reader at 1024 ranks on the same machine
 * (`node scripts/bench-ranks-view.js` measures both), over the view's 200 ms goal for one rank's change.
 */
export class RegistryWatcher implements vscode.Disposable {
  private timer: NodeJS.Timeout;
  private cliTimer: NodeJS.Timeout;
  private last = '';
  private current: Session[] = [];
  private fromCli: Session[] = [];
  private cliBusy = false;
  private changed = new vscode.EventEmitter<Session[]>();
  readonly onDidChange = this.changed.event;
  private cli = new CliRankSource(async () => runHarness(await currentHarness(Gated.listing), ['ps', '--json'], 30000));
  /** The last CLI listing error (shown in the view's message), cleared by a good read. */
  cliError: string | undefined;
  /** The remote entries the last `ps --json` skipped (not valid records), one line each: the Ranks view says them. */
  get skipped(): string[] {
    return this.cli.skipped;
  }
  /** Whether ranks are attached in this window (set by init.ts): then `ps --json` is polled for their collective positions. */
  attachedHere: () => boolean = () => false;
  /** Why this machine's registry root is refused (not the owner's alone), in the harness's words; shown as the view's message. */
  rootProblem: string | undefined;

  private problems = new NewProblems();

  /** `warn`: where each unreadable entry is said, once (the output channel). */
  constructor(
    private warn: (line: string) => void = () => undefined,
    pollMs = REGISTRY_POLL_MS,
  ) {
    this.timer = setInterval(() => this.refresh(), pollMs);
    this.cliTimer = setInterval(() => void this.pollCli(), CLI_POLL_MS);
    this.refresh();
    void this.pollCli();
  }

  get dir(): string {
    return registryDir(process.env, undefined, readSettings().registryDir);
  }

  refresh(): Session[] {
    const read = readRegistry(this.dir);
    this.rootProblem = read.refused;
    // a refused root is the view's message instead; entries are only warned about when they were read
    for (const line of this.problems.lines(read.refused ? [] : read.problems)) this.warn(line);
    this.current = this.fromCli.length ? mergeSessions(read.sessions, this.fromCli) : read.sessions;
    const sig = JSON.stringify([
      this.rootProblem,
      this.cli.skipped,
      this.current.map((s) => [
        s.entry.session_id,
        s.entry.state,
        s.entry.verified,
        s.entry.pg_timeout_s,
        s.entry.pg_timeout_source,
        s.ranks.map((r) => [r.rank, r.pid, r.state, r.attach_count, r.refused_count, r.verified, r.collective, r.stop, r.meshes]),
      ]),
    ]);
    if (sig !== this.last) {
      this.last = sig;
      this.changed.fire(this.current);
    }
    return this.current;
  }

  /** One `rtdebug ps --json` read when the listing setting asks for it (see cliPoll); never two at once. */
  async pollCli(force = false): Promise<void> {
    const decision = cliPoll(readSettings().listing, process.env, workspaceTrusted(), force, this.attachedHere());
    if (decision === 'untrusted') this.cliError = untrustedMessage(Gated.listing);
    if (this.cliBusy || decision !== 'poll') {
      if ((this.fromCli.length || this.cli.skipped.length) && decision !== 'poll') {
        this.fromCli = [];
        this.cli.skipped = [];
        this.refresh();
      }
      return;
    }
    this.cliBusy = true;
    try {
      this.fromCli = await this.cli.read();
      this.cliError = undefined;
    } catch (e) {
      this.cliError = (e as Error).message;
    } finally {
      this.cliBusy = false;
    }
    this.refresh();
  }

  /** The Refresh button: the files now, and the CLI listing; in an untrusted workspace it says why not. */
  async refreshNow(): Promise<void> {
    this.refresh();
    if (cliPoll(readSettings().listing, process.env, workspaceTrusted(), true) === 'untrusted') {
      void vscode.window.showWarningMessage(`rtdebug: ${untrustedMessage(Gated.listing)}`);
    }
    await this.pollCli(true);
  }

  get sessions(): Session[] {
    return this.current;
  }

  /** A fresh read (not the last poll) of one session, or of the newest when `id` is empty. */
  find(id?: string): Session | undefined {
    return findSession(this.refresh(), id);
  }

  dispose(): void {
    clearInterval(this.timer);
    clearInterval(this.cliTimer);
    this.changed.dispose();
  }
}
