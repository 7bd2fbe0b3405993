import * as fs from 'fs';
import * as path from 'path';
import { isProcessLive, LivenessCheck } from './processLiveness';
import { isUnverified, parseRankEntry, parseSessionEntry, RankEntry, Session } from './registryModel';
import { checkRoot, validSessionId } from './registryPaths';

/** `refused`: the root is not the owner's alone (checkRoot); then it is the one problem and nothing is listed. */
export interface ReadResult { sessions: Session[]; problems: string[]; refused?: string }

/**
 * Reads `<registry>/<session_id>/{session.json,rank-N.json}`. Only live sessions are returned (launcher pid
 * alive with the recorded create time); ranks whose process is gone are dropped. Unreadable or malformed
 * files are reported in `problems`, never thrown: the harness may be mid-write (it renames atomically,
 * but a session dir can exist before its session.json).
 *
 * As the harness does (registry/files.py): a root that is not the owner's alone (another user owns it, or
 * group/other bits are set) is refused with one problem and no entries; only directories named by a valid
 * session id are read, and an entry whose session_id (or rank) differs from its path is a problem, never
 * used. `me` is the effective uid (tests pass another).
 */
export function readRegistry(dir: string, live: LivenessCheck = isProcessLive, me: number | undefined = process.geteuid?.()): ReadResult {
  const problems: string[] = [];
  const sessions: Session[] = [];
  let names: string[];
  try {
    const refused = checkRoot(dir, fs.statSync(dir), me);
    if (refused) return { sessions, problems: [refused], refused };
    names = fs.readdirSync(dir);
  } catch { return { sessions, problems }; }
  for (const name of names) {
    if (!validSessionId(name)) continue;
    const sdir = path.join(dir, name);
    const sfile = path.join(sdir, 'session.json');
    let text: string;
    try { text = fs.readFileSync(sfile, 'utf8'); } catch { continue; }
    let entry;
    try { entry = parseSessionEntry(text, sfile); } catch (e) { problems.push((e as Error).message); continue; }
    if (entry.session_id !== name) { problems.push(mismatch(sfile)); continue; }
    if (entry.state !== 'starting' && entry.state !== 'running' && entry.state !== 'orphaned') continue;
    const ranks = readRanks(sdir, name, live, problems);
    if (!live(entry.launcher_pid, entry.launcher_create_time)) {
      // Launcher gone: the session only matters while some rank outlives it (shown as orphaned, to stop).
      if (!ranks.length) continue;
      entry.state = 'orphaned';
      for (const r of ranks) r.state = 'orphaned';
    }
    sessions.push({ entry, ranks });
  }
  sessions.sort((a, b) => b.entry.started_at - a.entry.started_at);
  return { sessions, problems };
}

const mismatch = (file: string) => `${file}: its session id or rank does not match its path`;

function readRanks(sdir: string, sessionId: string, live: LivenessCheck, problems: string[]): RankEntry[] {
  const ranks: RankEntry[] = [];
  let files: string[];
  try { files = fs.readdirSync(sdir); } catch { return ranks; }
  for (const f of files) {
    const m = /^rank-(\d+)\.json$/.exec(f);
    if (!m) continue;
    const file = path.join(sdir, f);
    try {
      const r = parseRankEntry(fs.readFileSync(file, 'utf8'), file);
      if (r.session_id !== sessionId || r.rank !== Number(m[1])) { problems.push(mismatch(file)); continue; }
      // A failed rank that is still alive is kept: under --post-mortem it waits for a debugger.
      if (r.state === 'exited' || !live(r.pid, r.create_time)) continue;
      ranks.push(r);
    } catch (e) { problems.push((e as Error).message); }
  }
  return ranks.sort((a, b) => a.rank - b.rank);
}

/**
 * The session with this id, or, when `id` is empty, the newest live one that is not an unverified remote
 * entry (those are never the default: a forged entry with a late started_at must not win).
 */
export function findSession(sessions: Session[], id?: string): Session | undefined {
  return id ? sessions.find((s) => s.entry.session_id === id) : sessions.find((s) => !isUnverified(s.entry));
}
