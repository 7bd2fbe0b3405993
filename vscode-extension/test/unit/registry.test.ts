import * as assert from 'assert';
import * as fs from 'fs';
import * as path from 'path';
import { test } from 'node:test';
import Ajv2020 from 'ajv/dist/2020';
import { checkRoot, registryDir, validSessionId } from '../../src/registry/registryPaths';
import { readRegistry, findSession } from '../../src/registry/registryReader';
import { parseRankEntry, parseSessionEntry, RegistryFormatError, isAttachable } from '../../src/registry/registryModel';
import { copyDir, FIXTURES, SCHEMA_PATH, tmpDir } from './helpers';

const schema = JSON.parse(fs.readFileSync(SCHEMA_PATH, 'utf8'));
const validate = new Ajv2020({ strict: false }).compile(schema);
const fixture = (...p: string[]) => path.join(FIXTURES, 'registry', ...p);
const liveExcept = (dead: number[]) => (pid: number) => !dead.includes(pid);

test('good fixtures validate against the repo registry schema', () => {
  for (const f of ['s1/session.json', 's1/rank-0.json', 's1/rank-1.json', 's2-stale/session.json']) {
    const ok = validate(JSON.parse(fs.readFileSync(fixture(f), 'utf8')));
    assert.ok(ok, `${f}: ${JSON.stringify(validate.errors)}`);
  }
});

test('the bad fixture fails both the schema and the parser', () => {
  const text = fs.readFileSync(fixture('s3-bad/session.json'), 'utf8');
  assert.equal(validate(JSON.parse(text)), false);
  assert.throws(() => parseSessionEntry(text), RegistryFormatError);
});

test('parser rejects what the schema rejects: wrong kind, missing field, not JSON', () => {
  const rank = JSON.parse(fs.readFileSync(fixture('s1/rank-0.json'), 'utf8'));
  assert.throws(() => parseSessionEntry(JSON.stringify(rank)), /expected kind "session"/);
  const noPort = { ...rank };
  delete noPort.port;
  assert.equal(validate(noPort), false);
  assert.throws(() => parseRankEntry(JSON.stringify(noPort)), /"port"/);
  assert.throws(() => parseRankEntry('{oops'), /not JSON/);
  assert.throws(() => parseRankEntry('[1]'), /not a JSON object/);
});

test('readRegistry returns live sessions with sorted ranks and reports malformed files', () => {
  const dir = tmpDir();
  copyDir(fixture(), dir);
  const { sessions, problems } = readRegistry(dir, liveExcept([2001]));
  assert.deepEqual(
    sessions.map((s) => s.entry.session_id),
    ['s1'],
  );
  assert.deepEqual(
    sessions[0].ranks.map((r) => [r.rank, r.state]),
    [
      [0, 'ready'],
      [1, 'starting'],
    ],
  );
  assert.equal(problems.length, 1);
  assert.match(problems[0], /s3-bad.*schema_version/);
  assert.ok(isAttachable(sessions[0].ranks[0]));
  assert.ok(!isAttachable(sessions[0].ranks[1]));
});

test('readRegistry drops dead ranks, exited ranks and ended sessions', () => {
  const dir = tmpDir();
  copyDir(fixture(), dir);
  assert.deepEqual(
    readRegistry(dir, liveExcept([2001, 1003])).sessions[0].ranks.map((r) => r.rank),
    [0],
  );
  const r0 = JSON.parse(fs.readFileSync(path.join(dir, 's1/rank-0.json'), 'utf8'));
  fs.writeFileSync(path.join(dir, 's1/rank-0.json'), JSON.stringify({ ...r0, state: 'exited', exit_code: 0 }));
  assert.deepEqual(readRegistry(dir, liveExcept([2001, 1003])).sessions[0].ranks, []);
  const s = JSON.parse(fs.readFileSync(path.join(dir, 's1/session.json'), 'utf8'));
  fs.writeFileSync(path.join(dir, 's1/session.json'), JSON.stringify({ ...s, state: 'exited' }));
  assert.deepEqual(
    readRegistry(dir, () => true).sessions.map((x) => x.entry.session_id),
    ['s2-stale'],
  );
});

test('readRegistry of a missing directory is empty, not an error', () => {
  assert.deepEqual(readRegistry('/nonexistent/rtdebug-registry'), { sessions: [], problems: [] });
});

test('findSession: by id, or the newest', () => {
  const dir = tmpDir();
  copyDir(fixture(), dir);
  const { sessions } = readRegistry(dir, () => true);
  assert.equal(findSession(sessions)?.entry.session_id, 's1');
  assert.equal(findSession(sessions, 's2-stale')?.entry.session_id, 's2-stale');
  assert.equal(findSession(sessions, 'nope'), undefined);
});

test('registryDir follows the harness rule', () => {
  assert.equal(registryDir({ RTDEBUG_REGISTRY_DIR: '/r', XDG_RUNTIME_DIR: '/x' }, '/home/u'), '/r');
  assert.equal(registryDir({ XDG_RUNTIME_DIR: '/x' }, '/home/u'), '/x/rtdebug');
  assert.equal(registryDir({}, '/home/u'), '/home/u/.rtdebug/registry');
  assert.equal(registryDir({ RTDEBUG_REGISTRY_DIR: '/r' }, '/home/u', '/setting'), '/setting');
});

test('a registry root open to other users is refused with one line and no entries (the harness wording)', () => {
  const dir = tmpDir();
  copyDir(fixture(), dir);
  assert.equal(readRegistry(dir, () => true).sessions.length, 2); // mkdtemp: 0700, ours
  fs.chmodSync(dir, 0o755);
  assert.deepEqual(
    readRegistry(dir, () => true),
    {
      sessions: [],
      problems: [`registry ${dir} is open to other users (mode 0o755); run: chmod 700 ${dir}`],
      refused: `registry ${dir} is open to other users (mode 0o755); run: chmod 700 ${dir}`,
    },
  );
  fs.chmodSync(dir, 0o710);
  assert.match(readRegistry(dir, () => true).refused ?? '', /open to other users \(mode 0o710\)/);
  fs.chmodSync(dir, 0o700);
  assert.equal(readRegistry(dir, () => true).refused, undefined);
});

test('a registry root owned by another uid is refused (whoever owns it owns these sessions)', () => {
  const dir = tmpDir();
  copyDir(fixture(), dir);
  const owner = fs.statSync(dir).uid;
  const r = readRegistry(dir, () => true, owner + 1);
  assert.deepEqual(r.sessions, []);
  assert.deepEqual(r.problems, [
    `registry ${dir} belongs to uid ${owner}, not to you (uid ${owner + 1}); remove it or point RTDEBUG_REGISTRY_DIR at a directory of your own`,
  ]);
  const file = path.join(dir, 's1', 'session.json');
  assert.equal(
    checkRoot(file, fs.statSync(file), owner),
    `registry ${file} is not a directory; point RTDEBUG_REGISTRY_DIR at a directory of your own`,
  );
  assert.equal(checkRoot('/r', { uid: 5, mode: 0o40777, isDirectory: () => true }, undefined), undefined); // no uids here: nothing to check
});

test('session ids: the harness pattern, never ".."', () => {
  for (const ok of ['s1', '20261203-224500-ab12', 'a.b_c-d', 'A'.repeat(128)]) assert.ok(validSessionId(ok), ok);
  for (const bad of ['', '.hidden', '-x', '_x', 'a..b', '..', 'a/b', 'a b', 'A'.repeat(129), 'é']) assert.ok(!validSessionId(bad), bad);
});

test('directories that are not valid session ids are ignored; entries that disagree with their path are problems', () => {
  const dir = tmpDir();
  copyDir(fixture(), dir);
  // a dir named like no session id, holding a well-formed entry that claims it
  copyDir(path.join(dir, 's1'), path.join(dir, '.evil'));
  const s1 = JSON.parse(fs.readFileSync(path.join(dir, 's1/session.json'), 'utf8'));
  fs.writeFileSync(path.join(dir, '.evil/session.json'), JSON.stringify({ ...s1, session_id: '.evil' }));
  // a session entry that names another session ("../victim" would become a path)
  fs.mkdirSync(path.join(dir, 's4'));
  fs.writeFileSync(path.join(dir, 's4/session.json'), JSON.stringify({ ...s1, session_id: '../victim' }));
  // rank files that name another rank, or another session
  const r0 = JSON.parse(fs.readFileSync(path.join(dir, 's1/rank-0.json'), 'utf8'));
  fs.writeFileSync(path.join(dir, 's1/rank-7.json'), JSON.stringify(r0));
  fs.writeFileSync(path.join(dir, 's1/rank-1.json'), JSON.stringify({ ...r0, rank: 1, session_id: 's2-stale' }));
  const { sessions, problems } = readRegistry(dir, liveExcept([2001]));
  assert.deepEqual(
    sessions.map((s) => s.entry.session_id),
    ['s1'],
  );
  assert.deepEqual(
    sessions[0].ranks.map((r) => r.rank),
    [0],
  );
  const mismatched = problems
    .filter((p) => p.endsWith(': its session id or rank does not match its path'))
    .map((p) => path.relative(dir, p.split(':')[0]))
    .sort();
  assert.deepEqual(mismatched, ['s1/rank-1.json', 's1/rank-7.json', 's4/session.json']);
  assert.ok(!problems.some((p) => p.includes('.evil')));
});
