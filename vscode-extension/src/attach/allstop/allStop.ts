import { keyOf, RankDebugStates, RankKey } from './rankDebugState';
import { parseStopDescription } from './stopFocus';

/**
 * All-stop across the attached ranks of one rtdebug session: when one rank stops (breakpoint, exception,
 * a user's pause), every other running rank of that session gets a DAP `pause`; a `continue` on one
 * continues them all. Feedback loops are avoided by remembering what we asked for: a rank that stops
 * while its pause from us is pending ('pausing') or resumes after our continue ('continuing') does not
 * propagate. A pause sent to a rank blocked in a collective lands only when the collective returns; if the
 * user continued in between, that late stop is resumed at once (its episode is over). A session whose ranks do
 * all-stop themselves (RankControl.ranksDoIt) is only tracked: the ranks pause and continue each other.
 */
export interface RankControl {
  /** Pause the rank's main thread (customRequest('pause') on its debug session). */
  pause(k: RankKey): Promise<void>;
  /** Continue the rank (customRequest('continue', { threadId })). */
  resume(k: RankKey, threadId: number | undefined): Promise<void>;
  /** Attached ranks of a session (our debug sessions). */
  attached(session: string): RankKey[];
  log(line: string): void;
  /**
   * Whether the session's ranks do all-stop themselves (their entries' `all_stop`, RTDEBUG_ALL_STOP=1): then a
   * stop or a continue propagates in the ranks, for every client, and nothing is sent from here.
   */
  ranksDoIt?(session: string): boolean;
}

export class AllStop {
  /** Per session: a counter bumped on every continue-all, so a late pause can tell it is stale. */
  private episode = new Map<string, number>();
  private pauseEpisode = new Map<string, number>();
  /** Ranks continued by Run All Ranks to Next Collective: their stop there does not pause the others. */
  private armed = new Set<string>();
  /**
   * Ranks paused only to evaluate something (a DAP evaluate needs a frame) and continued right after:
   * 'waiting' until it lands, 'keep' once an all-stop wants it stopped anyway, 'abandoned' when the caller
   * gave up waiting (a pause that lands later is resumed at once).
   */
  private brief = new Map<string, 'waiting' | 'keep' | 'abandoned'>();

  constructor(
    private states: RankDebugStates,
    private ctl: RankControl,
    private enabled: () => boolean,
    private now = () => Date.now(),
  ) {}

  /** A rank reported `stopped`. */
  stopped(k: RankKey, reason: string, threadId: number | undefined, where?: { file: string; line: number }, description?: string): void {
    const before = this.states.get(k);
    const ours = before?.state === 'pausing';
    this.states.set(k, { state: 'stopped', reason, threadId, where, stoppedAt: this.now(), description });
    const brief = this.brief.get(keyOf(k));
    if (ours && brief) {
      this.pauseEpisode.delete(keyOf(k));
      if (reason === 'pause') {
        if (brief === 'abandoned') {
          this.brief.delete(keyOf(k));
          this.ctl.log(`rtdebug: rank ${k.rank} stopped for an evaluate that was given up; resuming it`);
          void this.resumeOne(k, threadId);
        }
        return; // the evaluating caller continues it (resumeBrief); nobody else is paused for it
      }
      // it stopped by itself (a breakpoint, --stop-on) before our pause landed: a real stop, kept stopped
      if (brief === 'abandoned') this.brief.delete(keyOf(k));
      else this.brief.set(keyOf(k), 'keep');
      if (this.propagates(k.session)) this.pauseOthers(k.session, k.rank, `rank ${k.rank} stopped (${reason})`);
      return;
    }
    if (this.armed.delete(keyOf(k))) return; // stopped at its next collective, as asked: the others run on to theirs
    if (ours) {
      const sent = this.pauseEpisode.get(keyOf(k));
      this.pauseEpisode.delete(keyOf(k));
      if (sent !== undefined && sent !== this.ep(k.session)) {
        // Paused for an episode the user already continued: it was blocked all along; let it go.
        this.ctl.log(`rtdebug: rank ${k.rank} stopped for an all-stop that was already continued; resuming it`);
        void this.resumeOne(k, threadId);
      }
      return;
    }
    // --stop-on stops every rank at the same step by itself: a pause sent now would race its own suspend
    if (parseStopDescription(description)) return;
    if (this.propagates(k.session)) this.pauseOthers(k.session, k.rank, `rank ${k.rank} stopped (${reason})`);
  }

  /** A rank resumed: a `continue` request from the UI, or a `continued` event from the adapter. */
  continued(k: RankKey): void {
    const before = this.states.get(k);
    if (!before || before.state === 'running' || before.state === 'stepping') return;
    const ours = before.state === 'continuing';
    this.states.set(k, { state: 'running' });
    if (ours || !this.propagates(k.session)) return;
    this.continueAll(k.session, k.rank);
  }

  /**
   * A step request (next / stepIn / stepOut) on one rank: it runs again, alone; nothing propagates, and an
   * all-stop leaves it alone (its step stops it). A step over a collective returns only once the other ranks
   * reach it: Step All Ranks, or the stuck-step rule (collectives/collectiveStepping.ts) steps them too.
   */
  stepping(k: RankKey): void {
    const before = this.states.get(k);
    if (before?.state === 'stepping') return;
    this.states.set(k, { state: 'stepping', stepStartedAt: this.now(), threadId: before?.threadId });
  }

  /** Continue `ranks` (armed to stop at their next collective) and every other stopped rank; returns those asked. */
  runToCollective(session: string, ranks: RankKey[]): number[] {
    for (const k of ranks) this.armed.add(keyOf(k));
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

  /** Done with a brief pause: continue the rank, unless an all-stop came meanwhile (then it stays stopped). */
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

  /** Pause every running attached rank of the session except `except`. Returns the ranks asked. */
  pauseOthers(session: string, except: number | undefined, why: string): number[] {
    const asked: number[] = [];
    for (const r of this.ctl.attached(session)) {
      if (r.rank === except) continue;
      // a rank paused briefly to evaluate stays stopped now: this all-stop wants it stopped
      if (this.brief.has(keyOf(r))) this.brief.set(keyOf(r), 'keep');
      const st = this.states.get(r)?.state ?? 'running';
      if (st !== 'running' && st !== 'continuing') continue;
      this.armed.delete(keyOf(r));
      this.states.update(r, { state: 'pausing', pauseSentAt: this.now(), blockedAt: undefined, blockedNote: undefined });
      this.pauseEpisode.set(keyOf(r), this.ep(session));
      asked.push(r.rank);
      this.ctl.pause(r).catch((e: Error) => {
        this.ctl.log(`rtdebug: pause rank ${r.rank} failed: ${e.message}`);
        if (this.states.get(r)?.state === 'pausing') this.states.update(r, { state: 'running', pauseSentAt: undefined });
      });
    }
    if (asked.length) this.ctl.log(`rtdebug: all-stop: ${why}; pausing rank(s) ${asked.join(', ')}`);
    return asked;
  }

  /** Continue every stopped attached rank of the session except `except`; pending pauses become stale. */
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
    if (asked.length) this.ctl.log(`rtdebug: all-stop: continuing rank(s) ${asked.join(', ')}`);
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

  /** Whether a stop or continue in `session` is passed on from here: all-stop on, and not done by its ranks. */
  private propagates(session: string): boolean {
    return this.enabled() && !(this.ctl.ranksDoIt?.(session) ?? false);
  }

  private ep(session: string): number {
    return this.episode.get(session) ?? 0;
  }
}
