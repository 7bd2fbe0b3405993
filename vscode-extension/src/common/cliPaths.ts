import * as fs from 'fs';
import * as os from 'os';
import * as path from 'path';

/**
 * Where rtdebug CLI processes run. `python -m rtdebug` (and `python -c "import rtdebug"`) put the current
 * directory first on sys.path, so running them from the workspace folder would run a cloned repo's own
 * `rtdebug/__main__.py` (a cloned repository may be malicious: the threat the trust rule in trustGate.ts
 * is about). They run instead in an empty directory of ours: made by mkdtemp under os.tmpdir() (a fresh
 * unguessable name, mode 0700), so neither the workspace nor another local user can put a module there,
 * as they could in os.tmpdir() itself.
 *
 * The directory is checked every time it is handed out, not only when it was made: a tmp cleaner may remove
 * it while the extension runs, and in the sticky, world-writable tmp another local uid could then create the
 * same name — as a directory of its own, or as a symlink to one — with an `rtdebug/__main__.py` inside, which
 * `python3.10 -m rtdebug ps` (no `-P` before 3.11) would run as the user. So it must still be a directory
 * (lstat: a symlink is refused, whatever it points to), ours (uid), 0700 and empty; otherwise a new one is
 * made and used, and the old path is left alone (it is no longer ours to clean). While it is ours, nobody
 * else can remove or rename it (sticky tmp), so a check that passes holds until the process is spawned,
 * short of a cleaner and an attacker both acting in the microseconds between.
 * The user's own job (F5) is the one process that keeps the workspace as its cwd.
 */
let dir: string | undefined;

export function neutralCwd(): string {
  if (dir === undefined || whyNotPrivate(dir, process.geteuid?.()) !== undefined) dir = makePrivateDir();
  return dir;
}

/**
 * Why `d` is not a private empty directory of uid `me` (undefined when it is). `me` undefined (no uids on
 * this platform): only the directory, mode and emptiness checks apply.
 */
export function whyNotPrivate(d: string, me: number | undefined): string | undefined {
  let st: fs.Stats;
  try {
    st = fs.lstatSync(d);
  } catch (e) {
    return `${d}: ${(e as NodeJS.ErrnoException).code ?? 'cannot lstat'}`;
  }
  if (st.isSymbolicLink()) return `${d} is a symlink`;
  if (!st.isDirectory()) return `${d} is not a directory`;
  if (me !== undefined && st.uid !== me) return `${d} belongs to uid ${st.uid}, not ${me}`;
  if ((st.mode & 0o777) !== 0o700) return `${d} has mode 0o${(st.mode & 0o777).toString(8)}, not 0o700`;
  // Only we (or root) can write a 0700 directory of ours; anything in it was not put there by the extension.
  try {
    if (fs.readdirSync(d).length) return `${d} is not empty`;
  } catch {
    return `${d} cannot be listed`;
  }
  return undefined;
}

let cleanupArmed = false;

function makePrivateDir(): string {
  const made = fs.mkdtempSync(path.join(os.tmpdir(), 'rtdebug-cli-'));
  // mkdtemp asks for 0700, but a umask could take the owner's bits too; the check above wants exactly 0700.
  fs.chmodSync(made, 0o700);
  if (!cleanupArmed) {
    cleanupArmed = true;
    // Only the one in use at exit is removed: a replaced one was taken from us, or is gone.
    process.once('exit', () => {
      if (dir) {
        try {
          fs.rmdirSync(dir);
        } catch {
          /* not empty or gone: leave it */
        }
      }
    });
  }
  return made;
}

/**
 * A path the user wrote relative to the workspace (`"rtdebug.pythonPath": ".venv/bin/python"`), made
 * absolute against that folder, since the CLI no longer runs there. Bare names (`python3`, looked up on
 * PATH) and absolute paths are kept; without a folder there is nothing to resolve against.
 */
export function absoluteFrom(folder: string | undefined, p: string): string {
  if (!folder || path.isAbsolute(p) || (!p.includes('/') && !p.includes(path.sep))) return p;
  return path.resolve(folder, p);
}
