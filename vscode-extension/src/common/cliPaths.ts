import * as fs from 'fs';
import * as os from 'os';
import * as path from 'path';

/**
 * Where rtdebug CLI processes run. `python -m rtdebug` (and `python -c "import rtdebug"`) put the current
 * directory first on sys.path, so running them from the workspace folder would run a cloned repo's own
 * `rtdebug/__main__.py` (DESIGN.md, Trust: "a malicious workspace"). They run instead in one empty
 * directory of ours: created once per process by mkdtemp (mode 0700, a fresh unguessable name), so neither
 * the workspace nor another local user can put a module there, as they could in os.tmpdir() itself.
 * The user's own job (F5) is the one process that keeps the workspace as its cwd.
 */
let dir: string | undefined;

export function neutralCwd(): string {
  if (dir && fs.existsSync(dir)) return dir;
  dir = fs.mkdtempSync(path.join(os.tmpdir(), 'rtdebug-cli-'));
  const made = dir;
  process.once('exit', () => { try { fs.rmdirSync(made); } catch { /* not empty or gone: leave it */ } });
  return dir;
}

/**
 * A path the user wrote relative to the workspace (`"rtdebug.pythonPath": ".venv/bin/python"`), made
 * absolute against that folder, since the CLI no longer runs there. Bare names (`python3`, looked up on
 * PATH) and absolute paths are kept; without a folder there is nothing to resolve against.
 */
export function absoluteFrom(folder: string | undefined, p: string): string {
  if (!folder || path.isAbsolute(p) || !p.includes('/') && !p.includes(path.sep)) return p;
  return path.resolve(folder, p);
}
