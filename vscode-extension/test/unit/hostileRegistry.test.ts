import * as assert from 'assert';
import { execFileSync, spawnSync } from 'child_process';
import * as fs from 'fs';
import * as path from 'path';
import { test } from 'node:test';
import { MAX_ENTRY, readEntry, UnreadableEntry } from '../../src/registry/entryFile';
import { NewProblems, readRegistry, ReadResult } from '../../src/registry/registryReader';
import { fixtureRegistry, tmpDir } from './helpers';

/**
 * Every file under the registry may have been put there by something other than the harness. Each case: the
 * read returns (a FIFO never blocks it), the bad entry is skipped with one problem line in the harness's
 * words (harness/rtdebug/registry/entry.py `read_bounded`), and the good entries are still listed.
 */

const READER = path.resolve(__dirname, '../../src/registry/registryReader.js');

/**
 * readRegistry in a child node process, so that a read which blocks (a FIFO opened for reading waits for a
 * writer that never comes) fails this test at the timeout instead of hanging the whole test run.
 */
function readInChild(dir: string): ReadResult {
  const code = `process.stdout.write(JSON.stringify(require(${JSON.stringify(READER)}).readRegistry(${JSON.stringify(dir)}, () => true)))`;
  const r = spawnSync(process.execPath, ['-e', code], { encoding: 'utf8', timeout: 20000 });
  assert.equal(r.error, undefined, `the registry read did not return: ${r.error?.message}`);
  assert.equal(r.status, 0, r.stderr);
  return JSON.parse(r.stdout);
}

const ids = (r: ReadResult) => r.sessions.map((s) => [s.entry.session_id, s.ranks.map((k) => k.rank)]);

test('a FIFO named session.json or rank-N.json is skipped with one line, never read (it would hang every poll)', () => {
  const dir = fixtureRegistry();
  const sfile = path.join(dir, 's2-stale', 'session.json');
  const rfile = path.join(dir, 's1', 'rank-1.json');
  fs.rmSync(sfile);
  fs.rmSync(rfile);
  execFileSync('mkfifo', [sfile, rfile]);
  const r = readInChild(dir);
  assert.deepEqual(ids(r), [['s1', [0]]]);
  assert.deepEqual(r.problems.filter((p) => !p.includes('s3-bad')).sort(), [
    `${rfile}: not a regular file`,
    `${sfile}: not a regular file`,
  ]);
});

test('a symlinked entry is not followed, even to a well-formed entry of the same session', () => {
  const dir = fixtureRegistry();
  const elsewhere = tmpDir();
  for (const f of ['session.json', 'rank-1.json']) {
    fs.renameSync(path.join(dir, 's1', f), path.join(elsewhere, f));
    fs.symlinkSync(path.join(elsewhere, f), path.join(dir, 's1', f));
  }
  const r = readRegistry(dir, () => true);
  assert.deepEqual(ids(r), [['s2-stale', []]]);
  assert.deepEqual(
    r.problems.filter((p) => !p.includes('s3-bad')),
    [`${path.join(dir, 's1', 'session.json')}: a symbolic link`],
  );
  // with the session entry real again, the symlinked rank is the one skipped
  fs.rmSync(path.join(dir, 's1', 'session.json'));
  fs.copyFileSync(path.join(elsewhere, 'session.json'), path.join(dir, 's1', 'session.json'));
  const again = readRegistry(dir, () => true);
  assert.deepEqual(ids(again), [
    ['s1', [0]],
    ['s2-stale', []],
  ]);
  assert.deepEqual(
    again.problems.filter((p) => !p.includes('s3-bad')),
    [`${path.join(dir, 's1', 'rank-1.json')}: a symbolic link`],
  );
});

test('an entry over 1 MiB is skipped by its size, not read whole; a symlinked session directory is skipped', () => {
  const dir = fixtureRegistry();
  const rfile = path.join(dir, 's1', 'rank-0.json');
  const text = fs.readFileSync(rfile, 'utf8');
  fs.writeFileSync(rfile, text + ' '.repeat(MAX_ENTRY + 1 - Buffer.byteLength(text)));
  fs.symlinkSync(path.join(dir, 's1'), path.join(dir, 's5'));
  const r = readRegistry(dir, () => true);
  assert.deepEqual(ids(r), [
    ['s1', [1]],
    ['s2-stale', []],
  ]);
  assert.deepEqual(r.problems.filter((p) => !p.includes('s3-bad')).sort(), [
    `${rfile}: ${MAX_ENTRY + 1} bytes, more than an entry ever is (${MAX_ENTRY})`,
    `${path.join(dir, 's5')}: a symbolic link`,
  ]);
  // exactly the limit is still an entry
  fs.writeFileSync(rfile, text + ' '.repeat(MAX_ENTRY - Buffer.byteLength(text)));
  assert.deepEqual(ids(readRegistry(dir, () => true)).slice(0, 1), [['s1', [0, 1]]]);
});

test('readEntry: missing is undefined; a device or directory is not a regular file', () => {
  const d = tmpDir();
  assert.equal(readEntry(path.join(d, 'none.json')), undefined);
  assert.throws(
    () => readEntry(d),
    (e: Error) => e instanceof UnreadableEntry && e.message === `${d}: not a regular file`,
  );
  assert.throws(
    () => readEntry('/dev/zero'),
    (e: Error) => e.message === '/dev/zero: not a regular file',
  );
  fs.writeFileSync(path.join(d, 'a.json'), '{"x": 1}');
  assert.equal(readEntry(path.join(d, 'a.json')), '{"x": 1}');
  assert.throws(
    () => readEntry(path.join(d, 'a.json'), 4),
    (e: Error) => e.message === `${path.join(d, 'a.json')}: 8 bytes, more than an entry ever is (4)`,
  );
});

test("a registry root that is a symlink is refused, even one to a directory of the user's own", () => {
  const real = fixtureRegistry();
  const link = path.join(tmpDir(), 'registry');
  fs.symlinkSync(real, link);
  const want = `registry ${link} is a symbolic link; point RTDEBUG_REGISTRY_DIR at the real directory (${fs.realpathSync(real)})`;
  assert.deepEqual(
    readRegistry(link, () => true),
    { sessions: [], problems: [want], refused: want },
  );
  assert.equal(readRegistry(real, () => true).sessions.length, 2, 'the directory itself is fine');
});

const root = process.geteuid?.() === 0;
test(
  'a symlink on the way to the root that another user owns is refused (they could point it anywhere)',
  { skip: !root && 'needs root to lchown a symlink to another uid' },
  () => {
    const real = fixtureRegistry();
    const top = tmpDir();
    const hop = path.join(top, 'hop');
    fs.symlinkSync(path.dirname(real), hop);
    const via = path.join(hop, path.basename(real));
    assert.equal(readRegistry(via, () => true).sessions.length, 2, 'a link the user owns is fine');
    fs.lchownSync(hop, 65534, 65534);
    const want = `registry ${via}: ${hop} is a symbolic link owned by uid 65534; point RTDEBUG_REGISTRY_DIR at a directory whose path only you and root control`;
    assert.deepEqual(
      readRegistry(via, () => true),
      { sessions: [], problems: [want], refused: want },
    );
  },
);

test('each problem is warned about once while it lasts, in the words rtdebug ps uses', () => {
  const w = new NewProblems();
  assert.deepEqual(w.lines(['/r/s1/session.json: not a regular file']), [
    'rtdebug: warning: unreadable registry entry /r/s1/session.json: not a regular file',
  ]);
  assert.deepEqual(w.lines(['/r/s1/session.json: not a regular file']), []);
  assert.deepEqual(w.lines([]), []);
  assert.deepEqual(w.lines(['/r/s1/session.json: not a regular file', '/r/s2/rank-0.json: a symbolic link']), [
    'rtdebug: warning: unreadable registry entry /r/s1/session.json: not a regular file',
    'rtdebug: warning: unreadable registry entry /r/s2/rank-0.json: a symbolic link',
  ]);
});
