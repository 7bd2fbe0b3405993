import * as fs from 'fs';
import * as os from 'os';
import * as path from 'path';

/** Paths into the source tree (tests run from out/test/unit). */
export const EXT_ROOT = path.resolve(__dirname, '../../..');
export const REPO_ROOT = path.resolve(EXT_ROOT, '..');
export const FIXTURES = path.join(EXT_ROOT, 'test', 'fixtures');
export const SCHEMA_PATH = path.join(REPO_ROOT, 'harness', 'rtdebug', 'registry', 'registry.schema.json');

export function tmpDir(prefix = 'rtdebug-test-'): string {
  return fs.mkdtempSync(path.join(os.tmpdir(), prefix));
}

export function copyDir(src: string, dst: string): void {
  fs.cpSync(src, dst, { recursive: true });
}

/**
 * A private copy of test/fixtures/registry (mkdtemp: mode 0700, ours), since the reader, like the harness,
 * refuses a registry root that other users can read — as a checkout's 0755 fixture directory is.
 */
export function fixtureRegistry(): string {
  const dir = tmpDir();
  copyDir(path.join(FIXTURES, 'registry'), dir);
  return dir;
}

/** The Python interpreter that has the harness installed (CI passes RTDEBUG_PYTHON). */
export function harnessPython(): string | undefined {
  const p = process.env.RTDEBUG_PYTHON ?? path.join(REPO_ROOT, '.venv', 'bin', 'python');
  return fs.existsSync(p) ? p : undefined;
}
