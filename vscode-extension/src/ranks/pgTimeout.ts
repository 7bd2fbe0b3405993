import { formatDuration } from '../common/duration';

/**
 * The job's process-group timeout in the Ranks view (contract B2: `pg_timeout_s`, `pg_timeout_source` on the
 * session). It was fixed when the job started (an adopted job's cannot be raised at all): a peer that waits in
 * a collective longer than that ends the job. While ranks are paused we say how much is left, counted from
 * the earliest moment a peer could have started waiting: the first paused rank's stop, or an earlier entry
 * into a collective that has not returned.
 */
export interface TimeoutInputs {
  pgTimeoutS?: number | null;
  source?: string;
  /** When each paused rank of the session stopped (ms since the epoch, from its DAP `stopped` event). */
  stoppedAtMs: number[];
  /** When each rank still inside a collective entered it (seconds since the epoch, its `collective.since`). */
  enteredSinceS: number[];
  nowMs: number;
}

export interface TimeoutText {
  description: string;
  tooltip: string;
  leftS?: number;
  urgent: boolean;
}

/** Below this many seconds left the view marks the session (the user should continue now). */
export const TIMEOUT_URGENT_S = 120;

export function timeoutText(t: TimeoutInputs): TimeoutText | undefined {
  const pg = typeof t.pgTimeoutS === 'number' && Number.isFinite(t.pgTimeoutS) && t.pgTimeoutS > 0 ? t.pgTimeoutS : undefined;
  const src = t.source ? ` (${t.source})` : '';
  if (pg === undefined) {
    const what = t.source?.startsWith('unknown') ? `pg timeout ${t.source}` : `pg timeout unknown${src}`;
    return t.source ? { description: what, tooltip: `The job's process-group timeout could not be read${src}.`, urgent: false } : undefined;
  }
  const fixed = `The job's process-group timeout is ${formatDuration(pg)}${src}; it was fixed when the job started and cannot be raised now.`;
  if (!t.stoppedAtMs.length) return { description: `pg timeout ${formatDuration(pg)}${src}`, tooltip: fixed, urgent: false };
  const starts = [...t.stoppedAtMs, ...t.enteredSinceS.map((s) => s * 1000)].filter((x) => Number.isFinite(x) && x <= t.nowMs);
  const start = Math.min(...starts);
  const leftS = pg - (t.nowMs - start) / 1000;
  const why = 'A peer that waits in a collective for a paused rank longer than that ends the job.';
  if (leftS <= 0) {
    return {
      description: `pg timeout ${formatDuration(pg)} passed: the job may have ended`,
      tooltip: `${fixed}\n${why}\nPaused for ${formatDuration((t.nowMs - start) / 1000)}: longer than the timeout.`,
      leftS: 0,
      urgent: true,
    };
  }
  return {
    description: `≤ ${formatDuration(leftS)} left of the ${formatDuration(pg)} pg timeout`,
    tooltip: `${fixed}\n${why}\nAt most ${formatDuration(leftS)} left: counted from ${new Date(start).toLocaleTimeString()}, when the first rank paused or a peer entered a collective.`,
    leftS,
    urgent: leftS < TIMEOUT_URGENT_S,
  };
}
