import * as fs from 'fs';
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

/** The harness's session id rule (harness/rtdebug/registry/entry.py `valid_session_id`). */
const SESSION_ID = /^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$/;

/** A session id is only ever one directory name under the root: this pattern, and never "..". */
export function validSessionId(name: string): boolean {
  return SESSION_ID.test(name) && !name.includes('..');
}

/** What checkRoot needs of an fs.Stats: the root's own lstat (a symlink is refused, not followed). */
export interface RootStat {
  uid: number;
  mode: number;
  isDirectory(): boolean;
  isSymbolicLink?(): boolean;
}

const ENV = 'RTDEBUG_REGISTRY_DIR';

/**
 * Why the registry root is not the owner's alone (whoever owns or can write it owns these sessions), in the
 * harness's words (harness/rtdebug/registry/files.py `Registry.check_root`), or undefined when it is.
 * A root that is a symlink is refused even when it points at a directory of the user's: another user who
 * can write where the link lives could swap it between this check and the reads. `me` undefined (no uids
 * on this platform): only the symlink and directory checks apply.
 */
export function checkRoot(root: string, st: RootStat, me: number | undefined): string | undefined {
  if (st.isSymbolicLink?.()) return `registry ${root} is a symbolic link; point ${ENV} at the real directory (${linkTarget(root)})`;
  if (!st.isDirectory()) return `registry ${root} is not a directory; point ${ENV} at a directory of your own`;
  if (me === undefined) return undefined;
  if (st.uid !== me)
    return `registry ${root} belongs to uid ${st.uid}, not to you (uid ${me}); remove it or point ${ENV} at a directory of your own`;
  if (st.mode & 0o077) return `registry ${root} is open to other users (mode 0o${(st.mode & 0o7777).toString(8)}); run: chmod 700 ${root}`;
  return undefined;
}

function linkTarget(root: string): string {
  try {
    return fs.realpathSync(root);
  } catch {
    /* dangling */
  }
  try {
    return path.resolve(path.dirname(root), fs.readlinkSync(root));
  } catch {
    return '?';
  }
}

/**
 * Why a directory on the way to the root is not to be trusted (files.py `Registry._check_path`): a symlink
 * that neither the user nor root owns, whose owner could point it, and so the root, anywhere. Components
 * are lstat'ed from `/` down; the first that does not exist ends the walk (nothing further to follow).
 */
export function checkRootPath(root: string, me: number | undefined, lstat: (p: string) => RootStat = fs.lstatSync): string | undefined {
  if (me === undefined) return undefined;
  const parents: string[] = [];
  for (let p = path.dirname(path.resolve(root)); ; p = path.dirname(p)) {
    parents.unshift(p);
    if (path.dirname(p) === p) break;
  }
  for (const parent of parents) {
    let st: RootStat;
    try {
      st = lstat(parent);
    } catch {
      return undefined;
    }
    if (st.isSymbolicLink?.() && st.uid !== me && st.uid !== 0) {
      return `registry ${root}: ${parent} is a symbolic link owned by uid ${st.uid}; point ${ENV} at a directory whose path only you and root control`;
    }
  }
  return undefined;
}
