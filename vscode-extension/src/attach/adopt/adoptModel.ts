import { formatDuration } from '../../common/duration';
import { basename } from '../../common/fileName';

/**
 * "Adopt a Running Job…": the candidates `rtdebug adopt --list --json` prints (contract B1) and their quick
 * pick rows. The list comes from a CLI that read other processes' /proc entries, so every field is checked
 * here and a malformed candidate is dropped, never shown half-read.
 */
export interface AdoptCandidate {
  pid: number;
  kind: string;
  script: string;
  ranks: (number | null)[];
  worldSize: number | null;
  runningS: number;
  adoptedSession: string | null;
}

export interface AdoptPickItem {
  label: string;
  description: string;
  detail: string;
  pid: number;
}

const isInt = (v: unknown): v is number => typeof v === 'number' && Number.isInteger(v) && v >= 0;

function candidate(raw: unknown): AdoptCandidate | undefined {
  if (typeof raw !== 'object' || raw === null) return undefined;
  const c = raw as Record<string, unknown>;
  if (!isInt(c.pid) || c.pid < 1 || typeof c.script !== 'string' || typeof c.kind !== 'string') return undefined;
  if (!Array.isArray(c.ranks) || !c.ranks.every((r) => r === null || isInt(r))) return undefined;
  const running = typeof c.running_s === 'number' && Number.isFinite(c.running_s) ? c.running_s : 0;
  const adopted = typeof c.adopted_session === 'string' && c.adopted_session ? c.adopted_session : null;
  return {
    pid: c.pid,
    kind: c.kind.slice(0, 20),
    script: c.script,
    ranks: c.ranks as (number | null)[],
    worldSize: isInt(c.world_size) ? c.world_size : null,
    runningS: running,
    adoptedSession: adopted,
  };
}

/** `adopt --list --json` → candidates; text that is not a JSON list is the CLI's failure, said in one line. */
export function parseAdoptList(text: string): AdoptCandidate[] {
  let v: unknown;
  try {
    v = JSON.parse(text);
  } catch {
    throw new Error(`adopt --list --json printed no JSON: ${text.trim().split('\n')[0]?.slice(0, 120) ?? ''}`);
  }
  if (!Array.isArray(v)) throw new Error('adopt --list --json: expected a list of jobs');
  return v.map(candidate).filter((c): c is AdoptCandidate => !!c);
}

/** `0,1` / `0-3` / `?` for ranks a process did not say. */
function rankText(ranks: (number | null)[]): string {
  const known = ranks.filter((r): r is number => r !== null).sort((a, b) => a - b);
  if (!known.length) return ranks.length ? `${ranks.length} process(es), ranks unknown` : 'no ranks yet';
  const contiguous = known.every((r, i) => i === 0 || r === known[i - 1] + 1);
  const list = contiguous && known.length > 2 ? `${known[0]}-${known[known.length - 1]}` : known.join(',');
  return `${known.length === 1 ? 'rank' : 'ranks'} ${list}${known.length < ranks.length ? ` (+${ranks.length - known.length} unknown)` : ''}`;
}

export function adoptPickItems(cands: AdoptCandidate[]): AdoptPickItem[] {
  return cands.map((c) => ({
    label: `${c.adoptedSession ? '$(debug-alt)' : '$(server-process)'} ${basename(c.script) || '(unknown script)'}`,
    description: `pid ${c.pid} · ${c.kind} · ${rankText(c.ranks)}${c.worldSize !== null ? ` of ${c.worldSize}` : ''} · running ${formatDuration(c.runningS)}`,
    detail: `${c.script}${c.adoptedSession ? ` · adopted already (session ${c.adoptedSession}): picking it again changes nothing` : ''}`,
    pid: c.pid,
  }));
}

/** The argv of the adoption itself (the CLI's own flags default from the same settings as a launch). */
export const adoptArgs = (pid: number): string[] => ['adopt', String(pid)];
