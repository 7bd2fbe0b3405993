/**
 * A rank entry's `stop` (set while `--stop-on` holds the rank stopped; null otherwise): kind, reason,
 * origin (true: it began here; false: received; null: no origin, as for step=N), step. The entry may come
 * from a store anyone on that network could write, so it is read as `rtdebug ps` reads it
 * (harness/rtdebug/registry/table.py rank_state): the kind's first 12 characters, letters and digits only,
 * the reason's first 120, unprintable ones as "?".
 */
export interface StopEntry {
  kind: string;
  reason: string;
  origin: boolean | null;
  step: number | null;
}

/** The first `n` code points (not UTF-16 units), as the harness cuts text. */
const firstChars = (s: string, n: number): string => Array.from(s).slice(0, n).join('');
/** Unicode's "other" and "separator" characters, but ' ': what the harness shows as "?". */
const UNPRINTABLE = /[\p{C}\p{Z}]/u;
const printable = (s: string): string => Array.from(s, (c) => (c !== ' ' && UNPRINTABLE.test(c) ? '?' : c)).join('');

/** Python's str() of a JSON value, as far as a kind could be one. */
const pyStr = (v: unknown): string =>
  v === null || v === undefined ? 'None' : typeof v === 'boolean' ? (v ? 'True' : 'False') : String(v);

export function parseStop(raw: unknown): StopEntry | null {
  if (typeof raw !== 'object' || raw === null || Array.isArray(raw)) return null;
  const s = raw as Record<string, unknown>;
  if (typeof s.reason !== 'string') return null;
  const kind = Array.from(firstChars(pyStr(s.kind), 12))
    .filter((c) => /^[\p{L}\p{N}]$/u.test(c))
    .join('');
  const step = typeof s.step === 'number' && Number.isInteger(s.step) && s.step >= 0 ? s.step : null;
  return { kind, reason: printable(firstChars(s.reason, 120)), origin: typeof s.origin === 'boolean' ? s.origin : null, step };
}

/** `stopped (nonfinite: non-finite loss at step 5 (origin))`: the state `rtdebug ps` shows. */
export const stopText = (s: StopEntry): string => `stopped (${s.kind}: ${s.reason})`;
