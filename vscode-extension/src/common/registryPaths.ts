import * as os from 'os';
import * as path from 'path';

/**
 * The registry directory, by the same rule as the harness: an explicit override (the extension setting),
 * else $RTDEBUG_REGISTRY_DIR, else $XDG_RUNTIME_DIR/rtdebug, else ~/.rtdebug/registry.
 */
export function registryDir(env: NodeJS.ProcessEnv = process.env, home = os.homedir(), override = ''): string {
  if (override) return override;
  if (env.RTDEBUG_REGISTRY_DIR) return env.RTDEBUG_REGISTRY_DIR;
  if (env.XDG_RUNTIME_DIR) return path.join(env.XDG_RUNTIME_DIR, 'rtdebug');
  return path.join(home, '.rtdebug', 'registry');
}

/** The harness's session id rule (harness/rtdebug/registry/record.py `valid_session_id`). */
const SESSION_ID = /^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$/;

/** A session id is only ever one directory name under the root: this pattern, and never "..". */
export function validSessionId(name: string): boolean {
  return SESSION_ID.test(name) && !name.includes('..');
}

/** What checkRoot needs of an fs.Stats (the root is stat'ed following links, as os.stat does). */
export interface RootStat { uid: number; mode: number; isDirectory(): boolean }

/**
 * Why the registry root is not the owner's alone (whoever owns or can write it owns these sessions), in the
 * harness's words (harness/rtdebug/registry/files.py `Registry.check_root`), or undefined when it is.
 * `me` undefined (no uids on this platform): only the directory check applies.
 */
export function checkRoot(root: string, st: RootStat, me: number | undefined): string | undefined {
  const env = 'RTDEBUG_REGISTRY_DIR';
  if (!st.isDirectory()) return `registry ${root} is not a directory; point ${env} at a directory of your own`;
  if (me === undefined) return undefined;
  if (st.uid !== me) return `registry ${root} belongs to uid ${st.uid}, not to you (uid ${me}); remove it or point ${env} at a directory of your own`;
  if (st.mode & 0o077) return `registry ${root} is open to other users (mode 0o${(st.mode & 0o7777).toString(8)}); run: chmod 700 ${root}`;
  return undefined;
}
