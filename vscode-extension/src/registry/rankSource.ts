import { parseCollective } from './collectiveRecord';
import { parseRankEntry, parseSessionEntry, RankEntry, Session, SessionEntry } from './registryModel';

/**
 * What only the harness can list: `rtdebug ps --json`, its backend-independent listing, sees ranks on
 * other nodes (c10d store, Ray GCS), each rank's collective position and the job's pg timeout source. This
 * machine's own files are read by registryReader.ts (why both: registryWatcher.ts); the two are merged
 * here, by session id.
 */
export class CliRankSource {
  /** The remote entries the last listing skipped (not valid records), one line each. */
  skipped: string[] = [];
  /** `run` returns the stdout of `<python> -m <harness> ps --json`. */
  constructor(private run: () => Promise<string>) {}
  async read(): Promise<Session[]> {
    const text = await this.run();
    const sessions = parsePsJson(text);
    this.skipped = psSkipped(text);
    return sessions;
  }
}

/**
 * `ps --json`'s `skipped` list (remote entries that are not valid records: junk in the store or the KV) as
 * the harness words them (`rtdebug: warning: skipped <source> entry '<key>': <why>`).
 */
export function psSkipped(text: string): string[] {
  let v: unknown;
  try {
    v = JSON.parse(text);
  } catch {
    return [];
  }
  const list = (v as { skipped?: unknown }).skipped;
  if (!Array.isArray(list)) return [];
  return list
    .filter((x): x is Record<string, unknown> => typeof x === 'object' && x !== null)
    .map((x) => `rtdebug: warning: skipped ${String(x.source)} entry '${String(x.key).slice(0, 120)}': ${String(x.error)}`);
}

/**
 * `rtdebug ps --json` → sessions: `{"sessions": [<session entry> + "ranks": [<rank entry>…] + "source"?]}`.
 * Entries keep the registry schema; a malformed one is skipped, not fatal (a newer harness may add fields).
 */
export function parsePsJson(text: string): Session[] {
  let v: unknown;
  try {
    v = JSON.parse(text);
  } catch {
    throw new Error(`ps --json printed no JSON: ${text.slice(0, 120)}`);
  }
  const list = (v as { sessions?: unknown }).sessions;
  if (!Array.isArray(list)) throw new Error('ps --json: no "sessions" list');
  const out: Session[] = [];
  for (const raw of list) {
    if (typeof raw !== 'object' || raw === null) continue;
    const { ranks, ...rest } = raw as Record<string, unknown>;
    let entry;
    try {
      entry = parseSessionEntry(JSON.stringify(rest), 'ps --json');
    } catch {
      continue;
    }
    const rs: RankEntry[] = [];
    for (const r of Array.isArray(ranks) ? ranks : []) {
      try {
        rs.push({
          ...parseRankEntry(JSON.stringify(r), 'ps --json'),
          collective: parseCollective((r as Record<string, unknown>).collective),
        });
      } catch {
        /* skip */
      }
    }
    out.push({ entry: withTimeout(entry), ranks: rs.sort((a, b) => a.rank - b.rank) });
  }
  return out.sort((a, b) => b.entry.started_at - a.entry.started_at);
}

/** The session's pg timeout fields kept only when they have their contract's types. */
function withTimeout(e: SessionEntry): SessionEntry {
  const t = e.pg_timeout_s;
  const src = e.pg_timeout_source;
  return {
    ...e,
    pg_timeout_s: typeof t === 'number' && Number.isFinite(t) && t > 0 ? t : null,
    pg_timeout_source: typeof src === 'string' ? src.slice(0, 80) : undefined,
  };
}

/**
 * Union of two listings by session id. `primary` (the files, fresh every second) wins for a session both
 * know, except that ranks only the other one has (remote nodes) are added to it.
 */
export function mergeSessions(primary: Session[], other: Session[]): Session[] {
  const byId = new Map(primary.map((s) => [s.entry.session_id, { entry: s.entry, ranks: [...s.ranks] }]));
  for (const s of other) {
    const mine = byId.get(s.entry.session_id);
    if (!mine) {
      byId.set(s.entry.session_id, s);
      continue;
    }
    const theirs = new Map(s.ranks.map((r) => [r.rank, r]));
    // the files know no collective positions and no timeout source: those come from the CLI listing
    mine.ranks = mine.ranks.map((r) =>
      theirs.get(r.rank)?.collective !== undefined ? { ...r, collective: theirs.get(r.rank)!.collective } : r,
    );
    const have = new Set(mine.ranks.map((r) => r.rank));
    mine.ranks.push(...s.ranks.filter((r) => !have.has(r.rank)));
    if (typeof s.entry.pg_timeout_s === 'number' || s.entry.pg_timeout_source) {
      mine.entry = {
        ...mine.entry,
        pg_timeout_s: s.entry.pg_timeout_s ?? mine.entry.pg_timeout_s ?? null,
        pg_timeout_source: s.entry.pg_timeout_source ?? mine.entry.pg_timeout_source,
      };
    }
    mine.ranks.sort((a, b) => a.rank - b.rank);
    if (!mine.entry.source && s.entry.source) mine.entry = { ...mine.entry, source: s.entry.source };
  }
  return [...byId.values()].sort((a, b) => b.entry.started_at - a.entry.started_at);
}

/**
 * One CLI poll's decision. `poll`: run `rtdebug ps --json` (the listing wants it, ranks are attached here
 * under the `auto` listing, or Refresh forces it);
 * `skip`: not wanted; `untrusted`: wanted, but the workspace is untrusted, so no Python runs and only the
 * registry files are listed (Refresh says so; the timer stays quiet).
 */
export type CliPoll = 'poll' | 'skip' | 'untrusted';

export function cliPoll(setting: string, env: NodeJS.ProcessEnv, trusted: boolean, force: boolean, attachedHere = false): CliPoll {
  // ranks attached in this window: their collective positions and the job's pg timeout come from `ps --json`
  const wanted = useCliSource(setting, env) || (attachedHere && setting !== 'files');
  if (!trusted) return wanted ? 'untrusted' : 'skip';
  return wanted || force ? 'poll' : 'skip';
}

/** When to also ask the CLI: "cli" always, "files" never, "auto" when a cluster listing is configured. */
export function useCliSource(setting: string, env: NodeJS.ProcessEnv): boolean {
  if (setting === 'cli') return true;
  if (setting === 'files') return false;
  return !!(env.RAY_ADDRESS || env.RTDEBUG_STORE);
}
