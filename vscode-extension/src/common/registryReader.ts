import * as fs from 'fs';
import * as path from 'path';
import { isProcessLive, LivenessCheck } from './processLiveness';
import { parseRankEntry, parseSessionEntry, RankEntry, Session } from './registryModel';

export interface ReadResult { sessions: Session[]; problems: string[] }

/**
 * Reads `<registry>/<session_id>/{session.json,rank-N.json}`. Only live sessions are returned (launcher pid
 * alive with the recorded create time); ranks whose process is gone are dropped. Unreadable or malformed
 * files are reported in `problems`, never thrown: the harness may be mid-write (it renames atomically,
 * but a session dir can exist before its session.json).
 */
export function readRegistry(dir: string, live: LivenessCheck = isProcessLive): ReadResult {
  const problems: string[] = [];
  const sessions: Session[] = [];
  let names: string[];
  try { names = fs.readdirSync(dir); } catch { return { sessions, problems }; }
  for (const name of names) {
    const sdir = path.join(dir, name);
    const sfile = path.join(sdir, 'session.json');
    let text: string;
    try { text = fs.readFileSync(sfile, 'utf8'); } catch { continue; }
    let entry;
    try { entry = parseSessionEntry(text, sfile); } catch (e) { problems.push((e as Error).message); continue; }
    if (entry.state !== 'starting' && entry.state !== 'running' && entry.state !== 'orphaned') continue;
    const ranks = readRanks(sdir, live, problems);
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

function readRanks(sdir: string, live: LivenessCheck, problems: string[]): RankEntry[] {
  const ranks: RankEntry[] = [];
  let files: string[];
  try { files = fs.readdirSync(sdir); } catch { return ranks; }
  for (const f of files) {
    if (!/^rank-\d+\.json$/.test(f)) continue;
    const file = path.join(sdir, f);
    try {
      const r = parseRankEntry(fs.readFileSync(file, 'utf8'), file);
      // A failed rank that is still alive is kept: under --post-mortem it waits for a debugger.
      if (r.state === 'exited' || !live(r.pid, r.create_time)) continue;
      ranks.push(r);
    } catch (e) { problems.push((e as Error).message); }
  }
  return ranks.sort((a, b) => a.rank - b.rank);
}

/** The session with this id, or the newest live one when `id` is empty. */
export function findSession(sessions: Session[], id?: string): Session | undefined {
  return id ? sessions.find((s) => s.entry.session_id === id) : sessions[0];
}
