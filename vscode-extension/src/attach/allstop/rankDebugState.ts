/**
 * What this window's debugger knows about each attached rank, fed by the debug-adapter tracker: running,
 * stopped (why, where, which thread), or paused-but-not-yet-stopped (a rank blocked in a C++ collective
 * only stops when it returns to Python). No VS Code types: the tracker and the view both use it.
 */
export interface RankKey {
  session: string;
  rank: number;
}
export interface Location {
  file: string;
  line: number;
  function?: string;
}

export type RunState = 'running' | 'stopped' | 'pausing' | 'continuing' | 'stepping';

export interface RankDebugInfo {
  state: RunState;
  reason?: string;
  /** The stopped event's description (`rtdebug --stop-on nonfinite: …` when --stop-on stopped it). */
  description?: string;
  threadId?: number;
  where?: Location;
  /** When it stopped (ms since the epoch): the pg timeout's clock while paused. */
  stoppedAt?: number;
  /** Which stop this is (a serial per window): a later stop of the rank is never taken for this one. */
  stop?: number;
  /** Its stop is the one-shot stop at the next collective this window armed: it paused nobody (continuePlan.ts). */
  quiet?: boolean;
  /** When the pending pause was sent (state 'pausing'). */
  pauseSentAt?: number;
  /** Where a rank that does not answer the pause is (from `rtdebug stacks`), or why that is unknown. */
  blockedAt?: Location;
  blockedNote?: string;
}

export const keyOf = (k: RankKey): string => `${k.session}/${k.rank}`;

export class RankDebugStates {
  private map = new Map<string, RankDebugInfo>();
  private listeners: (() => void)[] = [];

  onDidChange(l: () => void): { dispose(): void } {
    this.listeners.push(l);
    return {
      dispose: () => {
        this.listeners = this.listeners.filter((x) => x !== l);
      },
    };
  }

  private fire(): void {
    for (const l of this.listeners) l();
  }

  get(k: RankKey): RankDebugInfo | undefined {
    return this.map.get(keyOf(k));
  }

  keys(session?: string): RankKey[] {
    return [...this.map.keys()]
      .map((s) => {
        const i = s.lastIndexOf('/');
        return { session: s.slice(0, i), rank: Number(s.slice(i + 1)) };
      })
      .filter((k) => session === undefined || k.session === session);
  }

  set(k: RankKey, info: RankDebugInfo): void {
    this.map.set(keyOf(k), info);
    this.fire();
  }

  update(k: RankKey, patch: Partial<RankDebugInfo>): RankDebugInfo {
    const next = { ...(this.map.get(keyOf(k)) ?? { state: 'running' as RunState }), ...patch };
    this.map.set(keyOf(k), next);
    this.fire();
    return next;
  }

  delete(k: RankKey): void {
    if (this.map.delete(keyOf(k))) this.fire();
  }
}
