/**
 * "rtdebug: Connect to a Job on Another Machine…", the parts without VS Code: the hosts of an ssh config,
 * the sessions a host's `rtdebug ps --json` lists (read as hostile input: only well-formed entries, names
 * bounded), the ssh config to name, and the `rtdebug connect` command line.
 */
import * as path from 'path';

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

/**
 * The ssh config file to name (`ssh -F`, `connect --ssh-config`), if any. The offered hosts come from
 * `$HOME/.ssh/config` (os.homedir()), but ssh reads `~/.ssh/config` of the passwd entry's home and ignores
 * `$HOME`: where the two differ (code-server, a container or a service started with another HOME) ssh would
 * not know the host the user picked, or would reach it with other settings. Then that file is named;
 * otherwise nothing is, so ssh keeps reading its system-wide config too (-F would drop it).
 */
export function sshConfigOverride(home: string, passwdHome: string | undefined, exists: (file: string) => boolean): string | undefined {
  if (!home || !passwdHome || path.resolve(home) === path.resolve(passwdHome)) return undefined;
  const file = path.join(home, '.ssh', 'config');
  return exists(file) ? file : undefined;
}

/** `rtdebug connect`'s arguments for a pick. */
export function connectArgs(host: string, sessionId: string, remoteRtdebug: string, sshConfig?: string): string[] {
  return ['connect', host, '--session', sessionId, '--remote-rtdebug', remoteRtdebug, ...(sshConfig ? ['--ssh-config', sshConfig] : [])];
}
