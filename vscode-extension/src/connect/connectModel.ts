/**
 * "rtdebug: Connect to a Job on Another Machine…", the parts without VS Code: the hosts of an ssh config,
 * the sessions a host's `rtdebug ps --json` lists (read as hostile input: only well-formed entries, names
 * bounded), and the `rtdebug connect` command line.
 */

/** The hosts an ssh config names (`Host a b`), without patterns (`*`, `?`, `!neg`); first seen first. */
export function sshConfigHosts(text: string): string[] {
  const out: string[] = [];
  for (const raw of text.split('\n')) {
    const line = raw.replace(/#.*/, '').trim();
    const m = /^host\s*[=\s]\s*(.+)$/i.exec(line);
    if (!m) continue;
    for (const name of m[1].split(/\s+/)) {
      if (/^[A-Za-z0-9_.@-]{1,255}$/.test(name) && !name.startsWith('-') && !out.includes(name)) out.push(name);
    }
  }
  return out;
}

export interface RemoteSession {
  sessionId: string;
  script: string;
  ranks: number;
  verified: boolean;
}

const SESSION_ID = /^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$/;

/** The live sessions of a host's `rtdebug ps --json` (anything malformed is left out). */
export function parseRemoteSessions(stdout: string): RemoteSession[] {
  let data: unknown;
  try {
    data = JSON.parse(stdout);
  } catch {
    return [];
  }
  const sessions = (data as { sessions?: unknown })?.sessions;
  if (!Array.isArray(sessions)) return [];
  const out: RemoteSession[] = [];
  for (const s of sessions.slice(0, 256)) {
    if (typeof s !== 'object' || s === null) continue;
    const e = s as Record<string, unknown>;
    if (typeof e.session_id !== 'string' || !SESSION_ID.test(e.session_id) || e.session_id.includes('..')) continue;
    if (e.state !== 'running' && e.state !== 'starting') continue;
    out.push({
      sessionId: e.session_id,
      script: typeof e.script === 'string' ? e.script.slice(0, 200) : '',
      ranks: Array.isArray(e.ranks) ? e.ranks.length : 0,
      verified: e.verified !== false,
    });
  }
  return out;
}

/** `rtdebug connect`'s arguments for a pick. */
export function connectArgs(host: string, sessionId: string, remoteRtdebug: string): string[] {
  return ['connect', host, '--session', sessionId, '--remote-rtdebug', remoteRtdebug];
}
