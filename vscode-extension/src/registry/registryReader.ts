import * as fs from 'fs';
import * as path from 'path';
import { readEntry, UnreadableEntry } from './entryFile';
import { isProcessLive, LivenessCheck } from './processLiveness';
import { isUnverified, parseRankEntry, parseSessionEntry, RankEntry, Session } from './registryModel';
import { checkRoot, checkRootPath, validSessionId } from './registryPaths';

/**
 * `problems`: one line each (`<path>: <why>`) for what was skipped; `refused`: the root is not the owner's
 * alone (checkRoot), then it is the one problem and nothing is listed.
 */
export interface ReadResult {
  sessions: Session[];
  problems: string[];
  refused?: string;
}

/**
 * Reads `<registry>/<session_id>/{session.json,rank-N.json}`. Only live sessions are returned (launcher pid
 * alive with the recorded create time); ranks whose process is gone are dropped. Unreadable or malformed
 * files are reported in `problems`, never thrown: the harness may be mid-write (it renames atomically,
 * but a session dir can exist before its session.json).
 *
 * As the harness does (registry/files.py): a root that is not the owner's alone (a symlink, another user
 * owns it, group/other bits are set, or a symlink on its path that another user owns) is refused with one
 * problem and no entries; only directories named by a valid session id are read, and an entry whose
 * session_id (or rank) differs from its path is a problem, never used. Each entry is opened without
 * following links or blocking, regular files only, size-bounded (entryFile.ts): a FIFO, a symlink or a
 * huge file is one problem line, never a hang. `me` is the effective uid (tests pass another).
 */
export function readRegistry(dir: string, live: LivenessCheck = isProcessLive, me: number | undefined = process.geteuid?.()): ReadResult {
  const problems: string[] = [];
  const sessions: Session[] = [];
  let names: fs.Dirent[];
  try {
    const refused = checkRootPath(dir, me) ?? checkRoot(dir, fs.lstatSync(dir), me);
    if (refused) return { sessions, problems: [refused], refused };
    names = fs.readdirSync(dir, { withFileTypes: true });
  } catch {
    return { sessions, problems };
  }
  for (const d of names) {
    if (!validSessionId(d.name)) continue;
    const sdir = path.join(dir, d.name);
    // the harness only ever mkdirs a session; a link or file here was not made by it (the root is the user's)
    if (!d.isDirectory()) {
      problems.push(`${sdir}: ${d.isSymbolicLink() ? 'a symbolic link' : 'not a directory'}`);
      continue;
    }
    const session = readSession(sdir, d.name, live, problems);
    if (session) sessions.push(session);
  }
  sessions.sort((a, b) => b.entry.started_at - a.entry.started_at);
  return { sessions, problems };
}

const mismatch = (file: string) => `${file}: its session id or rank does not match its path`;

/** The entry at `file` parsed by `parse`; undefined (and one problem when it is there but unusable) otherwise. */
function readParsed<T>(file: string, parse: (text: string, where: string) => T, problems: string[]): T | undefined {
  try {
    const text = readEntry(file);
    return text === undefined ? undefined : parse(text, file);
  } catch (e) {
    problems.push(e instanceof UnreadableEntry ? e.message : (e as Error).message);
    return undefined;
  }
}

function readSession(sdir: string, name: string, live: LivenessCheck, problems: string[]): Session | undefined {
  const sfile = path.join(sdir, 'session.json');
  const entry = readParsed(sfile, parseSessionEntry, problems);
  if (!entry) return undefined;
  if (entry.session_id !== name) {
    problems.push(mismatch(sfile));
    return undefined;
  }
  if (entry.state !== 'starting' && entry.state !== 'running' && entry.state !== 'orphaned') return undefined;
  const ranks = readRanks(sdir, name, live, problems);
  if (!live(entry.launcher_pid, entry.launcher_create_time)) {
    // Launcher gone: the session only matters while some rank outlives it (shown as orphaned, to stop).
    if (!ranks.length) return undefined;
    entry.state = 'orphaned';
    for (const r of ranks) r.state = 'orphaned';
  }
  return { entry, ranks };
}

function readRanks(sdir: string, sessionId: string, live: LivenessCheck, problems: string[]): RankEntry[] {
  const ranks: RankEntry[] = [];
  let files: string[];
  try {
    files = fs.readdirSync(sdir);
  } catch {
    return ranks;
  }
  for (const f of files) {
    const m = /^rank-(\d+)\.json$/.exec(f);
    if (!m) continue;
    const file = path.join(sdir, f);
    const r = readParsed(file, parseRankEntry, problems);
    if (!r) continue;
    if (r.session_id !== sessionId || r.rank !== Number(m[1])) {
      problems.push(mismatch(file));
      continue;
    }
    // A failed rank that is still alive is kept: under --post-mortem it waits for a debugger.
    if (r.state === 'exited' || !live(r.pid, r.create_time)) continue;
    ranks.push(r);
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

/**
 * The registry is read every second, so a bad entry would repeat its warning every second: this passes on
 * each problem once, when it appears (again after it was gone for a read), in the words `rtdebug ps` warns
 * with (`rtdebug: warning: unreadable registry entry <path>: <why>`). Only the last read's problems are kept.
 */
export class NewProblems {
  private last = new Set<string>();

  lines(problems: string[]): string[] {
    const fresh = problems.filter((p) => !this.last.has(p));
    this.last = new Set(problems);
    return [...new Set(fresh)].map((p) => `rtdebug: warning: unreadable registry entry ${p}`);
  }
}
