import * as assert from 'assert';
import * as fs from 'fs';
import * as path from 'path';
import { test } from 'node:test';
import Ajv2020 from 'ajv/dist/2020';
import { registryDir } from '../../src/common/registryPaths';
import { readRegistry, findSession } from '../../src/common/registryReader';
import { parseRankEntry, parseSessionEntry, RegistryFormatError, isAttachable } from '../../src/common/registryModel';
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
  const noPort = { ...rank }; delete noPort.port;
  assert.equal(validate(noPort), false);
  assert.throws(() => parseRankEntry(JSON.stringify(noPort)), /"port"/);
  assert.throws(() => parseRankEntry('{oops'), /not JSON/);
  assert.throws(() => parseRankEntry('[1]'), /not a JSON object/);
});

test('readRegistry returns live sessions with sorted ranks and reports malformed files', () => {
  const dir = tmpDir();
  copyDir(fixture(), dir);
  const { sessions, problems } = readRegistry(dir, liveExcept([2001]));
  assert.deepEqual(sessions.map((s) => s.entry.session_id), ['s1']);
  assert.deepEqual(sessions[0].ranks.map((r) => [r.rank, r.state]), [[0, 'ready'], [1, 'starting']]);
  assert.equal(problems.length, 1);
  assert.match(problems[0], /s3-bad.*schema_version/);
  assert.ok(isAttachable(sessions[0].ranks[0]));
  assert.ok(!isAttachable(sessions[0].ranks[1]));
});

test('readRegistry drops dead ranks, exited ranks and ended sessions', () => {
  const dir = tmpDir();
  copyDir(fixture(), dir);
  assert.deepEqual(readRegistry(dir, liveExcept([2001, 1003])).sessions[0].ranks.map((r) => r.rank), [0]);
  const r0 = JSON.parse(fs.readFileSync(path.join(dir, 's1/rank-0.json'), 'utf8'));
  fs.writeFileSync(path.join(dir, 's1/rank-0.json'), JSON.stringify({ ...r0, state: 'exited', exit_code: 0 }));
  assert.deepEqual(readRegistry(dir, liveExcept([2001, 1003])).sessions[0].ranks, []);
  const s = JSON.parse(fs.readFileSync(path.join(dir, 's1/session.json'), 'utf8'));
  fs.writeFileSync(path.join(dir, 's1/session.json'), JSON.stringify({ ...s, state: 'exited' }));
  assert.deepEqual(readRegistry(dir, () => true).sessions.map((x) => x.entry.session_id), ['s2-stale']);
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
