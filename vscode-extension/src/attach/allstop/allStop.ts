import { keyOf, RankDebugStates, RankKey } from './rankDebugState';

/**
 * The extension's side of all-stop, which the ranks do themselves (the harness's `rtdebug.rank.allstop`:
 * when one rank stops, the others pause; a continue in one continues all, whatever client is attached). Here:
 * what each attached rank is doing (fed by the tracker: `stopped`, `continued`, the user's `continue` and
 * steps), and the explicit actions, each a DAP request per rank: Pause All Ranks, Continue All Ranks, Run All
 * Ranks to Next Collective, and the brief pause a DAP `evaluate` needs in a running rank. None of these is passed
 * on by the ranks (a pause and the one-shot stop at the next collective pause nobody else). A pause sent to a
 * rank blocked in a collective lands only when the collective returns; if the user continued in between, that
 * late stop is resumed at once. The job's all-stop setting is handed to the ranks by jobAllStop.ts.
 */
export interface RankControl {
  /** Pause the rank's main thread (customRequest('pause') on its debug session). */
  pause(k: RankKey): Promise<void>;
  /** Continue the rank (customRequest('continue', { threadId })). */
  resume(k: RankKey, threadId: number | undefined): Promise<void>;
  /** Attached ranks of a session (our debug sessions). */
  attached(session: string): RankKey[];
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

  constructor(
    private states: RankDebugStates,
    private ctl: RankControl,
    private now = () => Date.now(),
  ) {}

  /** A rank reported `stopped`: its state; a pause of ours that is no longer wanted is undone. */
  stopped(k: RankKey, reason: string, threadId: number | undefined, where?: { file: string; line: number }, description?: string): void {
    const ours = this.states.get(k)?.state === 'pausing' && !this.byRanks.delete(keyOf(k));
    this.states.set(k, { state: 'stopped', reason, threadId, where, stoppedAt: this.now(), description });
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
   * A step request (next / stepIn / stepOut) on one rank: it runs again, alone. A step over a collective returns
   * only once the other ranks reach it: Step All Ranks, or the stuck-step rule (collectives/collectiveStepping.ts)
   * steps them too.
   */
  stepping(k: RankKey): void {
    const before = this.states.get(k);
    if (before?.state === 'stepping') return;
    this.states.set(k, { state: 'stepping', stepStartedAt: this.now(), threadId: before?.threadId });
  }

  /** Continue every stopped rank, each armed (by the caller) to stop at its next collective; returns those asked. */
  runToCollective(session: string): number[] {
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

  /** Continue All Ranks: continue every stopped attached rank of the session except `except`; pending pauses become stale. */
  continueAll(session: string, except?: number): number[] {
    this.episode.set(session, this.ep(session) + 1);
    const asked: number[] = [];
    for (const r of this.ctl.attached(session)) {
      if (r.rank === except) continue;
      const info = this.states.get(r);
      if (info?.state === 'pausing') {
        this.states.update(r, { blockedNote: 'continued before it stopped' });
        continue;
      }
      if (info?.state !== 'stopped') continue;
      asked.push(r.rank);
      void this.resumeOne(r, info.threadId);
    }
    if (asked.length) this.ctl.log(`rtdebug: continuing rank(s) ${asked.join(', ')}`);
    return asked;
  }

  /** The session's attached ranks that are still paused-but-not-stopped after `ms`. */
  overdue(ms: number): RankKey[] {
    const t = this.now();
    return this.states.keys().filter((k) => {
      const i = this.states.get(k);
      return i?.state === 'pausing' && i.pauseSentAt !== undefined && t - i.pauseSentAt >= ms && !i.blockedAt && !i.blockedNote;
    });
  }

  private async resumeOne(k: RankKey, threadId: number | undefined): Promise<void> {
    this.states.update(k, { state: 'continuing' });
    try {
      await this.ctl.resume(k, threadId);
      if (this.states.get(k)?.state === 'continuing') this.states.set(k, { state: 'running' });
    } catch (e) {
      this.ctl.log(`rtdebug: continue rank ${k.rank} failed: ${(e as Error).message}`);
    }
  }

  private ep(session: string): number {
    return this.episode.get(session) ?? 0;
  }
}
