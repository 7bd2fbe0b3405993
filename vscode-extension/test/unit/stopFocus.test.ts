import * as assert from 'assert';
import { test } from 'node:test';
import { AllStop } from '../../src/attach/allstop/allStop';
import { RankDebugStates } from '../../src/attach/allstop/rankDebugState';
import { parseStopDescription, StopOnFocus } from '../../src/attach/allstop/stopFocus';

/** Which rank session takes the focus when --stop-on stops every rank (harness: preserveFocusHint false only at the origin). */
const D = 'rtdebug --stop-on nonfinite: non-finite loss at step 5';

test('the origin (preserveFocusHint false) is focused; ranks that received it are not', () => {
  const f = new StopOnFocus();
  assert.equal(f.stopped('s', { rank: 0, description: D.replace('loss', 'grad'), preserveFocusHint: true }), undefined);
  assert.equal(f.stopped('s', { rank: 1, description: D, preserveFocusHint: false }), 1);
  assert.equal(f.stopped('s', { rank: 2, description: D, preserveFocusHint: true }), undefined);
});

test('one focus per episode: a second origin (or step=N, where every rank has none) does not move it', () => {
  const f = new StopOnFocus();
  const step = 'rtdebug --stop-on step: before optimizer step 3';
  assert.equal(f.stopped('s', { rank: 2, description: step, preserveFocusHint: false }), 2);
  assert.equal(f.stopped('s', { rank: 0, description: step, preserveFocusHint: false }), undefined);
  assert.equal(f.stopped('other', { rank: 0, description: step, preserveFocusHint: false }), 0, 'another job has its own');
  // the focused rank runs again: the next event is a new episode
  f.resumed('s', 0);
  assert.equal(f.stopped('s', { rank: 1, description: step, preserveFocusHint: false }), undefined);
  f.resumed('s', 2);
  assert.equal(f.stopped('s', { rank: 1, description: step, preserveFocusHint: false }), 1);
});

test('stops that are not --stop-on (a breakpoint, a pause) never take the focus here', () => {
  const f = new StopOnFocus();
  assert.equal(f.stopped('s', { rank: 0, preserveFocusHint: false }), undefined);
  assert.equal(f.stopped('s', { rank: 0, description: 'Paused on breakpoint', preserveFocusHint: false }), undefined);
  assert.equal(f.stopped('s', { rank: 0, description: D }), undefined, 'no hint: not the origin');
});

test('the description read back: kind and one-line reason', () => {
  assert.deepEqual(parseStopDescription(D), { kind: 'nonfinite', reason: 'non-finite loss at step 5' });
  assert.deepEqual(parseStopDescription('rtdebug --stop-on disagree: rank 2 differs\nin fc1.weight'), {
    kind: 'disagree',
    reason: 'rank 2 differs?in fc1.weight',
  });
  assert.equal(parseStopDescription('rtdebug --stop-on : x'), undefined);
  assert.equal(parseStopDescription(undefined), undefined);
  assert.equal(parseStopDescription('x'.repeat(600))?.reason, undefined);
});

test('the extension pauses nobody for a stop, --stop-on or not: the ranks do all-stop (and never for --stop-on)', async () => {
  const states = new RankDebugStates();
  const calls: string[] = [];
  const a = new AllStop(states, {
    pause: async (k) => void calls.push(`pause ${k.rank}`),
    resume: async () => {},
    attached: (session) => [0, 1, 2].map((rank) => ({ session, rank })),
    log: () => {},
  });
  a.stopped({ session: 's', rank: 0 }, 'breakpoint', 1, undefined, `${D.replace('loss', 'grad')}: received`);
  await new Promise((r) => setImmediate(r));
  assert.deepEqual(calls, []);
  a.stopped({ session: 's', rank: 1 }, 'breakpoint', 1, undefined, 'Paused on breakpoint');
  await new Promise((r) => setImmediate(r));
  assert.deepEqual(calls, [], 'a plain stop is all-stopped by the ranks, not from here');
});
