import * as assert from 'assert';
import { execFileSync } from 'child_process';
import * as fs from 'fs';
import * as path from 'path';
import { test } from 'node:test';
import { neutralCwd, whyNotPrivate } from '../../src/common/cliPaths';
import { runHarness } from '../../src/common/harnessCli';
import { tmpDir } from './helpers';

/**
 * The neutral cwd is checked each time it is used: after a tmp cleaner removed it, another local uid could
 * recreate its path with an `rtdebug/__main__.py` inside. Each hostile form below takes the place of the
 * cached directory; the next CLI call must run in a fresh private directory, and the planted module must
 * neither be in its cwd nor run.
 */

const mark = path.join(tmpDir('rtdebug-mark-'), 'PLANTED-RAN');

function plant(d: string): void {
  fs.mkdirSync(path.join(d, 'rtdebug'));
  const code = `open(${JSON.stringify(mark)}, "w").write("planted rtdebug ran")\n`;
  fs.writeFileSync(path.join(d, 'rtdebug', '__init__.py'), '');
  fs.writeFileSync(path.join(d, 'rtdebug', '__main__.py'), code);
}

/** Python 3.10 has no -P: its `-m` puts the cwd first on sys.path, the case this guards (pyenv's, when present). */
function python310(): string | undefined {
  for (const p of ['/root/.pyenv/versions/3.10.13/bin/python3.10', '/usr/bin/python3.10', '/usr/local/bin/python3.10']) {
    try {
      execFileSync(p, ['-c', '0'], { stdio: 'ignore' });
      return p;
    } catch {
      /* not this one */
    }
  }
  return undefined;
}
const py310 = python310();

/** A stand-in interpreter that writes the cwd it was started in (resolved) to `rec`, then exits 0. */
function recorder(): { python: string; rec: string } {
  const d = tmpDir();
  const rec = path.join(d, 'cwd');
  const python = path.join(d, 'fakepy');
  fs.writeFileSync(python, `#!/bin/sh\npwd -P > ${rec}\nls -A >> ${rec}\n`, { mode: 0o755 });
  return { python, rec };
}

/** Removes the hostile stand-in at `d` (a symlink is unlinked, never followed). */
function clear(d: string): void {
  if (fs.lstatSync(d).isSymbolicLink()) fs.unlinkSync(d);
  else fs.rmSync(d, { recursive: true, force: true });
}

const hostile: Record<string, (d: string) => void> = {
  'a symlink to a directory of the attacker': (d) => {
    const theirs = tmpDir('rtdebug-theirs-');
    plant(theirs);
    fs.symlinkSync(theirs, d);
  },
  'a directory with mode 0755': (d) => {
    fs.mkdirSync(d);
    fs.chmodSync(d, 0o755);
    plant(d);
  },
  'a directory of ours, 0700, but not empty': (d) => {
    fs.mkdirSync(d, { mode: 0o700 });
    plant(d);
  },
};
const root = process.geteuid?.() === 0;
if (root) {
  hostile['a 0700 directory owned by another uid (65534)'] = (d) => {
    fs.mkdirSync(d, { mode: 0o700 });
    plant(d);
    fs.chownSync(path.join(d, 'rtdebug'), 65534, 65534);
    fs.chownSync(d, 65534, 65534);
  };
}

test('neutral cwd: reused while it stays a private empty directory of ours', () => {
  const d = neutralCwd();
  assert.equal(whyNotPrivate(d, process.geteuid?.()), undefined);
  assert.equal(neutralCwd(), d);
  assert.equal(fs.lstatSync(d).mode & 0o777, 0o700);
});

for (const [what, make] of Object.entries(hostile)) {
  test(`neutral cwd: recreated by someone else as ${what} — a fresh directory is used and the planted module never runs`, async () => {
    const old = neutralCwd();
    fs.rmdirSync(old); // the tmp cleaner
    make(old); // the other uid, at the same path
    try {
      assert.notEqual(whyNotPrivate(old, process.geteuid?.()), undefined);
      const { python, rec } = recorder();
      await runHarness({ python, module: 'rtdebug' }, ['ps', '--json'], 10000);
      const [cwd, ...listing] = fs.readFileSync(rec, 'utf8').trim().split('\n');
      const fresh = neutralCwd();
      assert.notEqual(fresh, old);
      assert.equal(cwd, fs.realpathSync(fresh));
      assert.notEqual(cwd, fs.realpathSync(old));
      assert.deepEqual(listing, [], 'the CLI cwd must be empty: no planted rtdebug/');
      assert.equal(whyNotPrivate(fresh, process.geteuid?.()), undefined);
      if (py310) {
        // the real thing: python3.10 -m rtdebug, with the cwd first on sys.path and no -P to take it off
        await runHarness({ python: py310, module: 'rtdebug' }, ['ps', '--json'], 30000).catch(() => undefined);
        assert.ok(!fs.existsSync(mark), 'the planted rtdebug/__main__.py ran');
      }
    } finally {
      clear(old);
    }
  });
}

test(
  'the planted module would run from the hijacked directory (the control: python3.10 -m puts the cwd first)',
  { skip: !py310 && 'no python3.10' },
  () => {
    const d = tmpDir();
    plant(d);
    execFileSync(py310!, ['-m', 'rtdebug'], { cwd: d, stdio: 'ignore' });
    assert.ok(fs.existsSync(mark));
    fs.rmSync(mark);
  },
);

test('whyNotPrivate names what is wrong', () => {
  const d = tmpDir();
  const me = process.geteuid?.();
  assert.equal(whyNotPrivate(d, me), undefined);
  assert.equal(whyNotPrivate(path.join(d, 'gone'), me), `${path.join(d, 'gone')}: ENOENT`);
  fs.chmodSync(d, 0o755);
  assert.equal(whyNotPrivate(d, me), `${d} has mode 0o755, not 0o700`);
  fs.chmodSync(d, 0o700);
  assert.equal(whyNotPrivate(d, (me ?? 0) + 1), `${d} belongs to uid ${me ?? 0}, not ${(me ?? 0) + 1}`);
  fs.writeFileSync(path.join(d, 'x'), '');
  assert.equal(whyNotPrivate(d, me), `${d} is not empty`);
  const link = `${d}-link`;
  fs.symlinkSync(tmpDir(), link);
  assert.equal(whyNotPrivate(link, me), `${link} is a symlink`);
  assert.equal(whyNotPrivate(path.join(d, 'x'), me), `${path.join(d, 'x')} is not a directory`);
});
