import { RankEntry, Session, isAttachable } from '../../registry/registryModel';
import { AttachDeclinedError } from '../rank/remoteAttach';

/**
 * The logic behind one "all ranks" parent debug session: optionally start the job, wait until the wanted
 * ranks are ready in the registry, attach a child session to each, keep attaching ranks that become ready
 * later (restarts, lazy ranks), and end when the job or the session goes away. No VS Code types here:
 * everything it does to the outside goes through `GroupDeps`.
 */
export interface GroupJob {
  sessionId: Promise<string>;
  exited: Promise<number | null>;
  running: boolean;
  stop(): Promise<void>;
  lastLines(n?: number): string[];
}

export interface GroupDeps {
  readSession(id?: string): Session | undefined;
  startJob?(): GroupJob;
  attach(session: string, rank: RankEntry): Promise<void>;
  detachAll(terminateDebuggee: boolean): Promise<void>;
  log(line: string): void;
}

export interface GroupOptions {
  session?: string;
  ranks?: number[];
  readyTimeoutMs: number;
  pollMs?: number;
}

export class GroupError extends Error {}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

export class RankGroup {
  private job?: GroupJob;
  private sessionId?: string;
  private stopped = false;
  private attached = new Set<string>();
  private endedCb: (reason: string) => void = () => {};
  readonly ended: Promise<string>;

  constructor(
    private deps: GroupDeps,
    private opts: GroupOptions,
  ) {
    this.ended = new Promise((r) => {
      this.endedCb = r;
    });
  }

  get session(): string | undefined {
    return this.sessionId;
  }

  /** Resolves once the first set of ranks is attached; throws GroupError with a user-facing message. */
  async start(): Promise<void> {
    const poll = this.opts.pollMs ?? 500;
    const deadline = Date.now() + this.opts.readyTimeoutMs;
    if (this.deps.startJob) {
      this.job = this.deps.startJob();
      let timer: NodeJS.Timeout | undefined;
      const id = await Promise.race([
        this.job.sessionId,
        this.job.exited.then((c) => ({ exit: c })),
        new Promise<{ timeout: true }>((r) => {
          timer = setTimeout(() => r({ timeout: true }), this.opts.readyTimeoutMs);
        }),
      ]);
      clearTimeout(timer);
      if (typeof id !== 'string' && 'timeout' in id)
        throw new GroupError(
          `the job printed no "rtdebug: session …" line within ${Math.round(this.opts.readyTimeoutMs / 1000)} s:\n${this.job.lastLines().join('\n')}`,
        );
      if (typeof id !== 'string')
        throw new GroupError(`the job exited (code ${id.exit}) before it started a session:\n${this.job.lastLines().join('\n')}`);
      this.sessionId = id;
      this.job.exited.then((c) => this.end(`job exited with code ${c}`));
    } else {
      const s = this.deps.readSession(this.opts.session);
      if (!s)
        throw new GroupError(
          this.opts.session
            ? `no live rtdebug session "${this.opts.session}"`
            : 'no live rtdebug session: start one with `rtdebug torchrun …` first',
        );
      this.sessionId = s.entry.session_id;
    }
    let ready: RankEntry[] = [];
    for (;;) {
      if (this.stopped) return;
      const s = this.deps.readSession(this.sessionId);
      if (this.job && !this.job.running)
        throw new GroupError(`the job exited before its ranks were ready:\n${this.job.lastLines().join('\n')}`);
      if (s) {
        ready = s.ranks.filter((r) => isAttachable(r) && this.wanted(r.rank));
        const expected = this.opts.ranks?.length ?? (s.entry.ports.length || s.entry.nproc_per_node);
        if (ready.length >= expected) break;
      } else if (!this.job) throw new GroupError(`rtdebug session ${this.sessionId} ended`);
      if (Date.now() > deadline) {
        const have = ready.map((r) => r.rank).join(',') || 'none';
        throw new GroupError(
          `ranks never became ready within ${Math.round(this.opts.readyTimeoutMs / 1000)} s (ready: ${have}) in session ${this.sessionId}`,
        );
      }
      await sleep(poll);
    }
    for (const r of ready) await this.attachOne(r);
    void this.watch(poll * 2);
  }

  private wanted(rank: number): boolean {
    return !this.opts.ranks || this.opts.ranks.includes(rank);
  }

  private async attachOne(r: RankEntry): Promise<void> {
    const key = `${r.rank}:${r.pid}`;
    if (this.attached.has(key)) return;
    this.attached.add(key);
    this.deps.log(`rtdebug: attaching to rank ${r.rank} at ${r.host}:${r.port} (session ${r.session_id})`);
    try {
      await this.deps.attach(r.session_id, r);
    } catch (e) {
      // a host the user declined stays unattached: not retried (and not asked about again)
      if (!(e instanceof AttachDeclinedError)) this.attached.delete(key);
      this.deps.log(`rtdebug: attach to rank ${r.rank} failed: ${(e as Error).message}`);
    }
  }

  /** Keeps attaching ranks that become ready later; ends the group when the session is gone. */
  private async watch(pollMs: number): Promise<void> {
    while (!this.stopped) {
      await sleep(pollMs);
      if (this.stopped || !this.sessionId) return;
      const s = this.deps.readSession(this.sessionId);
      if (!s) {
        if (!this.job) this.end(`session ${this.sessionId} ended`);
        continue;
      }
      for (const r of s.ranks) if (isAttachable(r) && this.wanted(r.rank)) await this.attachOne(r);
    }
  }

  private end(reason: string): void {
    if (this.stopped) return;
    this.stopped = true;
    this.endedCb(reason);
  }

  /** Stop debugging: detach (launch: also end the job). */
  async stop(): Promise<void> {
    this.end('stopped');
    await this.deps.detachAll(!!this.job);
    if (this.job) await this.job.stop();
  }
}
