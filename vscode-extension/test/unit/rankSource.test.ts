import * as assert from 'assert';
import * as fs from 'fs';
import * as path from 'path';
import { test } from 'node:test';
import { rankForEndpoint } from '../../src/attach/rank/attachConfig';
import { mergeSessions, parsePsJson, useCliSource } from '../../src/registry/rankSource';
import { readRegistry } from '../../src/registry/registryReader';
import { copyDir, FIXTURES, tmpDir } from './helpers';
import { rankEntry, sessionOf } from './session';

const psJson = (sessions: unknown[]) => JSON.stringify({ schema_version: 1, registry: '/r', sessions });

test('parsePsJson: sessions with their ranks and source; malformed entries are skipped', () => {
  const s = {
    ...sessionOf([]).entry,
    source: 'c10d store 10.0.0.1:29500',
    ranks: [rankEntry(3, 'ready', { host: '10.0.0.2', node_rank: 1 }), { kind: 'rank' }, rankEntry(2, 'attached')],
  };
  const bad = { kind: 'session', schema_version: 1 };
  const out = parsePsJson(psJson([bad, s]));
  assert.equal(out.length, 1);
  assert.equal(out[0].entry.source, 'c10d store 10.0.0.1:29500');
  assert.deepEqual(
    out[0].ranks.map((r) => [r.rank, r.host]),
    [
      [2, '127.0.0.1'],
      [3, '10.0.0.2'],
    ],
  );
  assert.throws(() => parsePsJson('Traceback'), /printed no JSON/);
  assert.throws(() => parsePsJson('{}'), /no "sessions" list/);
});

test('mergeSessions: files win, remote ranks and remote-only sessions are added', () => {
  const files = [sessionOf([rankEntry(0, 'attached'), rankEntry(1, 'ready')])];
  const cli = [
    {
      ...sessionOf([rankEntry(0, 'ready'), rankEntry(2, 'ready', { host: '10.0.0.2' })]),
      entry: { ...sessionOf([]).entry, source: 'store' },
    },
    sessionOf([rankEntry(0, 'ready', { session_id: 's2' })], 's2', 5),
  ];
  const m = mergeSessions(files, cli);
  assert.deepEqual(
    m.map((s) => s.entry.session_id),
    ['s2', 's1'],
  );
  const s1 = m[1];
  assert.deepEqual(
    s1.ranks.map((r) => [r.rank, r.state]),
    [
      [0, 'attached'],
      [1, 'ready'],
      [2, 'ready'],
    ],
  );
  assert.equal(s1.entry.source, 'store');
  assert.equal(files[0].ranks.length, 2, 'the input is not modified');
});

test('useCliSource: files / cli / auto (cluster listing configured)', () => {
  assert.equal(useCliSource('files', { RAY_ADDRESS: 'x' }), false);
  assert.equal(useCliSource('cli', {}), true);
  assert.equal(useCliSource('auto', {}), false);
  assert.equal(useCliSource('auto', { RAY_ADDRESS: '10.0.0.1:6379' }), true);
  assert.equal(useCliSource('auto', { RTDEBUG_STORE: 'h:1' }), true);
});

test('the registry files: a session whose launcher is gone but a rank lives is orphaned; a live failed rank is kept', async () => {
  const dir = tmpDir();
  copyDir(path.join(FIXTURES, 'registry'), dir);
  const r1 = JSON.parse(fs.readFileSync(path.join(dir, 's1/rank-1.json'), 'utf8'));
  fs.writeFileSync(path.join(dir, 's1/rank-1.json'), JSON.stringify({ ...r1, state: 'failed', error: 'ValueError: boom' }));
  const live = (pid: number) => pid !== 2001;
  let sessions = readRegistry(dir, live).sessions;
  assert.deepEqual(
    sessions[0].ranks.map((r) => [r.rank, r.state]),
    [
      [0, 'ready'],
      [1, 'failed'],
    ],
  );
  sessions = readRegistry(dir, (pid) => pid !== 2001 && pid !== 1001).sessions;
  assert.equal(sessions[0].entry.state, 'orphaned');
  assert.deepEqual(
    sessions[0].ranks.map((r) => r.state),
    ['orphaned', 'orphaned'],
  );
  sessions = readRegistry(dir, (pid) => pid > 5000).sessions;
  assert.deepEqual(sessions, [], 'launcher and ranks gone: nothing to show');
});

test('rankForEndpoint: the rank a generated debugpy attach config talks to', () => {
  const ss = [sessionOf([rankEntry(0, 'ready'), rankEntry(1, 'ready', { host: '0.0.0.0' })])];
  assert.deepEqual(rankForEndpoint(ss, { host: '127.0.0.1', port: 5679 }), { session: 's1', rank: 1 });
  assert.deepEqual(rankForEndpoint(ss, { host: 'localhost', port: 5678 }), { session: 's1', rank: 0 });
  assert.equal(rankForEndpoint(ss, { host: '10.0.0.9', port: 5678 }), undefined);
  assert.equal(rankForEndpoint(ss, { host: '127.0.0.1', port: 6000 }), undefined);
});
