import * as assert from 'assert';
import { test } from 'node:test';
import { timeoutText } from '../../src/ranks/pgTimeout';
import { sessionLive, sessionRow } from '../../src/ranks/ranksTree';
import { rankEntry, sessionOf } from './session';

const NOW = 1_800_000_000_000;

test('no pg timeout known: nothing, or "unknown" with where it was looked for', () => {
  assert.equal(timeoutText({ stoppedAtMs: [], enteredSinceS: [], nowMs: NOW }), undefined);
  assert.equal(
    timeoutText({ pgTimeoutS: null, source: 'not read', stoppedAtMs: [NOW], enteredSinceS: [], nowMs: NOW })?.description,
    'pg timeout unknown (not read)',
  );
  assert.equal(
    timeoutText({ pgTimeoutS: null, source: 'unknown: not read in a rank', stoppedAtMs: [], enteredSinceS: [], nowMs: NOW })?.description,
    'pg timeout unknown: not read in a rank',
  );
});

test('running: the timeout and its source; paused: what is left, from the first stop', () => {
  const run = timeoutText({ pgTimeoutS: 1800, source: 'gloo default', stoppedAtMs: [], enteredSinceS: [], nowMs: NOW })!;
  assert.equal(run.description, 'pg timeout 30m 00s (gloo default)');
  assert.match(run.tooltip, /fixed when the job started and cannot be raised now/);
  const paused = timeoutText({
    pgTimeoutS: 1800,
    source: 'gloo default',
    stoppedAtMs: [NOW - 79_000, NOW - 10_000],
    enteredSinceS: [],
    nowMs: NOW,
  })!;
  assert.equal(paused.description, '≤ 28m 41s left of the 30m 00s pg timeout');
  assert.equal(paused.leftS, 1721);
  assert.equal(paused.urgent, false);
});

test('a peer that entered a collective before the first stop starts the clock earlier; near the end it is urgent; past it says so', () => {
  const t = timeoutText({ pgTimeoutS: 600, stoppedAtMs: [NOW - 10_000], enteredSinceS: [NOW / 1000 - 500], nowMs: NOW })!;
  assert.equal(t.description, '≤ 1m 40s left of the 10m 00s pg timeout');
  assert.equal(t.urgent, true);
  const past = timeoutText({
    pgTimeoutS: 60,
    source: 'TORCH_NCCL_TIMEOUT',
    stoppedAtMs: [NOW - 61_000],
    enteredSinceS: [NOW / 1000 + 99],
    nowMs: NOW,
  })!;
  assert.equal(past.description, 'pg timeout 1m 00s passed: the job may have ended');
  assert.equal(past.leftS, 0);
});

test('the session row counts from its stopped ranks (stoppedAt from the DAP stopped event)', () => {
  const s = sessionOf([rankEntry(0, 'attached'), rankEntry(1, 'attached')]);
  s.entry.pg_timeout_s = 300;
  s.entry.pg_timeout_source = '--pg-timeout';
  const live = sessionLive(
    s,
    (r) => (r === 0 ? { state: 'stopped', stoppedAt: NOW - 60_000 } : { state: 'pausing', pauseSentAt: NOW - 59_000 }),
    NOW,
  );
  const row = sessionRow(s, live);
  assert.match(row.description, / · ≤ 4m 00s left of the 5m 00s pg timeout$/);
  assert.match(row.tooltip, /--pg-timeout/);
  assert.equal(row.icon, 'server-process');
  const urgent = sessionRow(
    s,
    sessionLive(s, () => ({ state: 'stopped', stoppedAt: NOW - 250_000 }), NOW),
  );
  assert.deepEqual([urgent.icon, urgent.color], ['warning', 'charts.orange']);
});
