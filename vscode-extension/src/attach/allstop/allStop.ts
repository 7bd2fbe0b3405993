import { continuePlan, ContinuePlan, JobEntries } from './continuePlan';
import { keyOf, RankDebugInfo, RankDebugStates, RankKey } from './rankDebugState';

/** How long Continue All waits for the ranks to continue a rank before it continues it itself (continuePlan.ts). */
export const CONTINUE_SETTLE_MS = 2000;

/**
 * The extension's side of all-stop, which the ranks do themselves (the harness's `rtdebug.rank.allstop`:
 * when one rank stops, the others pause; a continue in one continues all, whatever client is attached). Here:
 * what each attached rank is doing (fed by the tracker: `stopped`, `continued`, the user's `continue` and
 * steps), and the explicit actions, each a DAP request per rank: Pause All Ranks, Continue All Ranks, Run All
 * Ranks to Next Collective, and the brief pause a DAP `evaluate` needs in a running rank. None of these is passed
 * on by the ranks (a pause and the one-shot stop at the next collective pause nobody else). Continue All Ranks
 * leaves the continuing to the ranks when they do it (continuePlan.ts): one `continue`, to a rank whose stop is
 * the all-stop's. A pause sent to a rank blocked in a collective lands only when the collective returns; if the
 * user continued in between, that late stop is resumed at once. The job's all-stop setting is handed to the
 * ranks by jobAllStop.ts.
 */
export interface RankControl {
  /** Pause the rank's main thread (customRequest('pause') on its debug session). */
  pause(k: RankKey): Promise<void>;
  /** Continue the rank (customRequest('continue', { threadId })). */
  resume(k: RankKey, threadId: number | undefined): Promise<void>;
  /** Attached ranks of a session (our debug sessions). */
  attached(session: string): RankKey[];
  /** What the job's rank entries say now (a fresh read), undefined when unknown: Continue All's plan. */
  job?(session: string): JobEntries | undefined;
  log(line: string): void;
}

export class AllStop {
  /** Per session: a counter bumped on every continue-all, so a late pause can tell it is stale. */
  private episode = new Map<string, number>();
  private pauseEpisode = new Map<string, number>();
  /**
   * Ranks paused only to evaluate something (a DAP evaluate needs a frame) and continued right after:
   * 'waiting' until it lands, 'keep' once Pause All Ranks wants it stopped anyway, 'abandoned' when the caller
   * gave up waiting (a pause that lands later is resumed at once).
   */
  private brief = new Map<string, 'waiting' | 'keep' | 'abandoned'>();
  /** Ranks whose entries say the ranks' all-stop is pausing them (a pause pending: blocked in C++ meanwhile). */
  private byRanks = new Set<string>();
  /** Ranks run to their next collective: their next stop of their own is the one-shot one (it sets nothing). */
  private oneShot = new Set<string>();
  private stops = 0;
  /** The last Continue All's sending, done (tests wait on it). */
  continuing: Promise<void> = Promise.resolve();

  constructor(
    private states: RankDebugStates,
    private ctl: RankControl,
    private now = () => Date.now(),
    private settleMs = CONTINUE_SETTLE_MS,
  ) {}

  /** A rank reported `stopped`: its state; a pause of ours that is no longer wanted is undone. */
  stopped(k: RankKey, reason: string, threadId: number | undefined, where?: { file: string; line: number }, description?: string): void {
    const ours = this.states.get(k)?.state === 'pausing' && !this.byRanks.delete(keyOf(k));
    const quiet = reason !== 'pause' && this.oneShot.delete(keyOf(k));
    const stop = ++this.stops;
    this.states.set(k, {
      state: 'stopped',
      reason,
      threadId,
      where,
      stoppedAt: this.now(),
      stop,
      description,
      ...(quiet ? { quiet } : {}),
    });
    if (!ours) return;
    const brief = this.brief.get(keyOf(k));
    const sent = this.pauseEpisode.get(keyOf(k));
    this.pauseEpisode.delete(keyOf(k));
    if (brief) {
      if (brief !== 'abandoned') {
        if (reason !== 'pause') this.brief.set(keyOf(k), 'keep'); // it stopped by itself (a breakpoint) first: kept
        return; // the evaluating caller continues it (resumeBrief)
      }
      this.brief.delete(keyOf(k));
      if (reason !== 'pause') return;
      this.ctl.log(`rtdebug: rank ${k.rank} stopped for an evaluate that was given up; resuming it`);
      void this.resumeOne(k, threadId);
      return;
    }
    if (reason === 'pause' && sent !== undefined && sent !== this.ep(k.session)) {
      // Paused for a Pause All the user already continued: it was blocked all along; let it go.
      this.ctl.log(`rtdebug: rank ${k.rank} stopped for a pause that was already continued; resuming it`);
      void this.resumeOne(k, threadId);
    }
  }

  /** A rank resumed: a `continue` request from the UI, or a `continued` event from the adapter. */
  continued(k: RankKey): void {
    const before = this.states.get(k);
    this.byRanks.delete(keyOf(k));
    if (!before || before.state === 'running' || before.state === 'stepping') return;
    this.states.set(k, { state: 'running' });
  }

  /**
   * What the rank's entry says (its `debug` state, read by the registry watcher): `pausing` while the ranks'
   * all-stop has asked it to pause and it has not stopped yet (blocked in a C++ collective), so the view can say
   * it is blocked and where; no longer pausing without a stop (continued meanwhile): running again.
   */
  followEntry(k: RankKey, pausing: boolean): void {
    const st = this.states.get(k)?.state ?? 'running';
    if (pausing && st === 'running') {
      this.byRanks.add(keyOf(k));
      this.states.update(k, { state: 'pausing', pauseSentAt: this.now(), blockedAt: undefined, blockedNote: undefined });
    } else if (!pausing && st === 'pausing' && this.byRanks.delete(keyOf(k))) {
      this.states.set(k, { state: 'running' });
    }
  }

  /**
   * A step request (next / stepIn / stepOut) on one rank: it runs again. The ranks' all-stop makes a step that
   * needs its peers (over a collective) a short continue for them, and its stop pauses them again; Step All Ranks
   * (collectives/collectiveStepping.ts) steps every stopped rank at once.
   */
  stepping(k: RankKey): void {
    const before = this.states.get(k);
    if (before?.state === 'stepping') return;
    this.states.set(k, { state: 'stepping', threadId: before?.threadId });
  }

  /**
   * Continue every stopped rank, each armed (by the caller) to stop at its next collective; returns those asked.
   * That next stop of each is marked `quiet`: it set nothing in the ranks' all-stop (continuePlan.ts).
   */
  runToCollective(session: string): number[] {
    for (const r of this.ctl.attached(session)) if (this.states.get(r)?.state === 'stopped') this.oneShot.add(keyOf(r));
    return this.continueAll(session);
  }

  /**
   * Pause one running rank only to evaluate in it (resumeBrief continues it): its stop pauses nobody else.
   * Returns false when it is not running (nothing sent).
   */
  pauseBrief(k: RankKey): boolean {
    const st = this.states.get(k)?.state ?? 'running';
    if (st !== 'running') return false;
    this.brief.set(keyOf(k), 'waiting');
    this.states.update(k, { state: 'pausing', pauseSentAt: this.now(), blockedAt: undefined, blockedNote: undefined });
    this.pauseEpisode.set(keyOf(k), this.ep(k.session));
    this.ctl.pause(k).catch((e: Error) => {
      this.ctl.log(`rtdebug: pause rank ${k.rank} failed: ${e.message}`);
      this.brief.delete(keyOf(k));
      if (this.states.get(k)?.state === 'pausing') this.states.update(k, { state: 'running', pauseSentAt: undefined });
    });
    return true;
  }

  /** Whether the rank is paused (or being paused) only for an evaluate. */
  isBrief(k: RankKey): boolean {
    const b = this.brief.get(keyOf(k));
    return b === 'waiting' || b === 'abandoned';
  }

  /** Done with a brief pause: continue the rank, unless it was to stay stopped meanwhile ('keep'). */
  async resumeBrief(k: RankKey): Promise<void> {
    const b = this.brief.get(keyOf(k));
    this.brief.delete(keyOf(k));
    const info = this.states.get(k);
    if (b === 'waiting' && info?.state === 'stopped') await this.resumeOne(k, info.threadId);
  }

  /** The caller stopped waiting for a brief pause: if it lands later, it is resumed at once. */
  abandonBrief(k: RankKey): void {
    const b = this.brief.get(keyOf(k));
    if (b === undefined || b === 'keep' || this.states.get(k)?.state === 'stopped') void this.resumeBrief(k);
    else this.brief.set(keyOf(k), 'abandoned');
  }

  /** Pause All Ranks: pause every running attached rank of the session except `except`. Returns the ranks asked. */
  pauseOthers(session: string, except: number | undefined, why: string): number[] {
    const asked: number[] = [];
    for (const r of this.ctl.attached(session)) {
      if (r.rank === except) continue;
      // a rank paused briefly to evaluate stays stopped now: the user wants it stopped
      if (this.brief.has(keyOf(r))) this.brief.set(keyOf(r), 'keep');
      const st = this.states.get(r)?.state ?? 'running';
      if (st !== 'running' && st !== 'continuing') continue;
      this.states.update(r, { state: 'pausing', pauseSentAt: this.now(), blockedAt: undefined, blockedNote: undefined });
      this.pauseEpisode.set(keyOf(r), this.ep(session));
      asked.push(r.rank);
      this.ctl.pause(r).catch((e: Error) => {
        this.ctl.log(`rtdebug: pause rank ${r.rank} failed: ${e.message}`);
        if (this.states.get(r)?.state === 'pausing') this.states.update(r, { state: 'running', pauseSentAt: undefined });
      });
    }
    if (asked.length) this.ctl.log(`rtdebug: ${why}: pausing rank(s) ${asked.join(', ')}`);
    return asked;
  }

  /**
   * Continue All Ranks: every stopped attached rank of the session except `except` goes on (returned); pending
   * pauses become stale. Where the ranks continue each other, one `continue` does it (continuePlan.ts: which rank,
   * and the rule); a rank they leave at its stop after `settleMs` is continued from here. `continuing` is done when
   * every `continue` is sent.
   */
  continueAll(session: string, except?: number): number[] {
    this.episode.set(session, this.ep(session) + 1);
    const at = new Map<number, RankDebugInfo>();
    for (const r of this.ctl.attached(session)) {
      if (r.rank === except) continue;
      const info = this.states.get(r);
      if (info?.state === 'pausing') {
        this.states.update(r, { blockedNote: 'continued before it stopped' });
        continue;
      }
      if (info?.state === 'stopped') at.set(r.rank, info);
    }
    if (!at.size) return [];
    const plan = continuePlan(
      [...at].map(([rank, info]) => ({ rank, quiet: info.quiet })),
      this.ctl.job?.(session),
      except,
    );
    const asked = [...at.keys()].sort((a, b) => a - b);
    this.ctl.log(`rtdebug: continuing rank(s) ${asked.join(', ')}: ${plan.why}`);
    this.continuing = this.send(session, plan, at);
    return asked;
  }

  private async send(session: string, plan: ContinuePlan, at: Map<number, RankDebugInfo>): Promise<void> {
    const key = (rank: number): RankKey => ({ session, rank });
    const own = plan.own.map((r) => this.resumeOne(key(r), at.get(r)?.threadId));
    if (plan.first === undefined) {
      await Promise.all(own);
      return;
    }
    const sent = await this.resumeOne(key(plan.first), at.get(plan.first)?.threadId);
    const left = sent ? await this.stillAt(plan.byRanks.map(key), at) : plan.byRanks.map(key);
    if (left.length)
      this.ctl.log(
        `rtdebug: rank(s) ${left.map((k) => k.rank).join(', ')} not continued by the ranks' all-stop: continuing them from here`,
      );
    await Promise.all([...own, ...left.map((k) => this.resumeOne(k, at.get(k.rank)?.threadId))]);
  }

  /** Those of `ranks` still at the stop they were at (`at`) once all have left it, or after `settleMs`. */
  private stillAt(ranks: RankKey[], at: Map<number, RankDebugInfo>): Promise<RankKey[]> {
    const still = () =>
      ranks.filter((k) => {
        const i = this.states.get(k);
        return i?.state === 'stopped' && i.stop === at.get(k.rank)?.stop;
      });
    return new Promise((resolve) => {
      if (!still().length) return resolve([]);
      const done = () => {
        clearTimeout(timer);
        sub.dispose();
        resolve(still());
      };
      const timer = setTimeout(done, this.settleMs);
      const sub = this.states.onDidChange(() => {
        if (!still().length) done();
      });
    });
  }

  /** The session's attached ranks that are still paused-but-not-stopped after `ms`. */
  overdue(ms: number): RankKey[] {
    const t = this.now();
    return this.states.keys().filter((k) => {
      const i = this.states.get(k);
      return i?.state === 'pausing' && i.pauseSentAt !== undefined && t - i.pauseSentAt >= ms && !i.blockedAt && !i.blockedNote;
    });
  }

  /** Send one `continue`; false when it failed (logged). */
  private async resumeOne(k: RankKey, threadId: number | undefined): Promise<boolean> {
    this.states.update(k, { state: 'continuing' });
    try {
      await this.ctl.resume(k, threadId);
      if (this.states.get(k)?.state === 'continuing') this.states.set(k, { state: 'running' });
      return true;
    } catch (e) {
      this.ctl.log(`rtdebug: continue rank ${k.rank} failed: ${(e as Error).message}`);
      return false;
    }
  }

  private ep(session: string): number {
    return this.episode.get(session) ?? 0;
  }
}
