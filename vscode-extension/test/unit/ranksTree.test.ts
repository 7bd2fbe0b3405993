import * as assert from 'assert';
import { test } from 'node:test';
import { RankDebugInfo } from '../../src/attach/allstop/rankDebugState';
import { rankRow, rankViewState, sessionRow } from '../../src/ranks/ranksTree';
import { rankEntry, sessionOf } from './session';

const st = (r: Parameters<typeof rankViewState>[0], d?: RankDebugInfo) => rankViewState(r, d);

test('rank state: registry state refined by our debug session', () => {
  assert.deepEqual(st(rankEntry(0, 'starting')), { state: 'starting', text: 'starting' });
  assert.equal(st(rankEntry(0, 'ready', { wait: true })).state, 'waiting');
  assert.equal(st(rankEntry(0, 'ready', { wait: true, attach_count: 1 })).text, 'ready (detached)');
  assert.equal(st(rankEntry(0, 'ready')).state, 'ready');
  assert.equal(st(rankEntry(0, 'attached')).text, 'attached (another client)');
  assert.deepEqual(st(rankEntry(0, 'attached'), { state: 'running' }), { state: 'attached', text: 'attached, running' });
  assert.deepEqual(st(rankEntry(0, 'attached'), { state: 'stopped', reason: 'breakpoint', where: { file: '/p/train.py', line: 42 } }), {
    state: 'stopped',
    text: 'stopped (breakpoint) at train.py:42',
  });
  assert.equal(st(rankEntry(1, 'attached'), { state: 'pausing', pauseSentAt: 1 }).text, 'attached, pausing…');
  assert.deepEqual(st(rankEntry(1, 'attached'), { state: 'pausing', blockedAt: { file: '/t/c10d.py', line: 7, function: 'all_reduce' } }), {
    state: 'blocked',
    text: 'blocked in all_reduce (c10d.py:7): pause pending',
  });
  assert.equal(
    st(rankEntry(1, 'attached'), { state: 'pausing', blockedNote: 'no stack (x)' }).text,
    'blocked: pause pending; no stack (x)',
  );
  assert.deepEqual(st(rankEntry(0, 'failed', { error: 'ValueError: x' })), { state: 'failed', text: 'failed: ValueError: x' });
  assert.equal(st(rankEntry(0, 'orphaned'), { state: 'running' }).state, 'orphaned');
});

test('rank row: what the view shows, the menus match and a screen reader says', () => {
  const s = sessionOf([rankEntry(1, 'attached', { refused_count: 2 })]);
  const row = rankRow(s, s.ranks[0], { state: 'stopped', reason: 'pause', where: { file: '/p/t.py', line: 9 } });
  assert.equal(row.label, 'rank 1');
  assert.equal(row.contextValue, 'rtdebugRank.stopped.attached');
  assert.match(row.description, /^stopped \(pause\) at t\.py:9 · local 1 · 127\.0\.0\.1:5679 · pid 101 · 2 refused$/);
  assert.match(row.accessibilityLabel, /rank 1, stopped \(pause\) at t\.py:9, local rank 1, endpoint 127\.0\.0\.1 port 5679, process 101/);
  assert.match(row.tooltip, /2 connection\(s\) refused/);
  assert.equal(row.icon, 'debug-pause');
  assert.equal(rankRow(s, { ...s.ranks[0], state: 'ready' }, undefined).contextValue, 'rtdebugRank.ready');
  const remote = rankRow(s, { ...s.ranks[0], refused_count: 0, host: '10.0.0.2', hostname: 'node-b', node_ip: '10.0.0.2' }, undefined);
  assert.match(remote.description, /10\.0\.0\.2:5679 · pid 101 · on node-b$/);
  assert.match(remote.tooltip, /node node-b 10\.0\.0\.2/);
});

test("rank row: a connected rank shows its own pid on its node, not the ssh master's", () => {
  const tunnel = { node: 'node-b', remote_host: '127.0.0.1', remote_port: 5679, remote_pid: 4242 };
  const s = sessionOf([rankEntry(1, 'ready', { pid: 900, tunnel })]);
  const row = rankRow(s, s.ranks[0], undefined);
  assert.match(row.description, / · 127\.0\.0\.1:5679 · pid 4242$/);
  assert.match(row.accessibilityLabel, /, process 4242$/);
  assert.match(row.tooltip, /debug endpoint 127\.0\.0\.1:5679, pid 4242\nforwarded over ssh from node-b \(ssh pid 900\)\n/);
  // a forward without the rank's pid, or a forged one, shows the entry's pid, as rtdebug ps does
  for (const remote_pid of [undefined, true, -1, 1.5, '77'] as unknown[]) {
    const r = { ...s.ranks[0], tunnel: { ...tunnel, remote_pid } } as (typeof s.ranks)[0];
    assert.match(rankRow(s, r, undefined).description, /pid 900$/);
    assert.doesNotMatch(rankRow(s, r, undefined).tooltip, /forwarded over ssh/);
  }
  assert.match(rankRow(s, { ...s.ranks[0], tunnel: null } as unknown as (typeof s.ranks)[0], undefined).description, /pid 900$/);
});

test('session row: mode, script, node/cluster, state', () => {
  const s = sessionOf([rankEntry(0, 'ready'), rankEntry(1, 'ready')]);
  const row = sessionRow(s);
  assert.equal(row.label, 's1');
  assert.equal(row.description, 'torchrun t.py · 2 rank(s) · node 0 · 127.0.0.1 · running');
  assert.equal(row.contextValue, 'rtdebugSession');
  const remote = sessionRow({ ...s, entry: { ...s.entry, nnodes: '2', source: 'ray 10.0.0.1:6379', state: 'orphaned' } });
  assert.equal(remote.description, 'torchrun t.py · 2 rank(s) · 2 nodes · ray 10.0.0.1:6379 · orphaned');
  assert.equal(remote.icon, 'warning');
  assert.doesNotMatch(sessionRow({ ...s, entry: { ...s.entry, nnodes: '1:1' } }).description, /nodes/);
  assert.match(sessionRow({ ...s, entry: { ...s.entry, nnodes: '1:4' } }).description, / · 1:4 nodes · /);
});
