import * as assert from 'assert';
import { test } from 'node:test';
import { AllStop, RankControl } from '../../src/attach/allstop/allStop';
import { RankDebugStates, RankKey } from '../../src/attach/allstop/rankDebugState';

/** Fake ranks: what the coordinator asked each one, and the adapter's answers fed back as a tracker would. */
function setup(ranks = [0, 1, 2], enabled = true) {
  const states = new RankDebugStates();
  const calls: string[] = [];
  let t = 1000;
  const ctl: RankControl = {
    pause: async (k) => {
      calls.push(`pause ${k.rank}`);
    },
    resume: async (k, thread) => {
      calls.push(`continue ${k.rank} thread ${thread}`);
    },
    attached: (session) => ranks.map((rank) => ({ session, rank })),
    log: () => {},
  };
  const on = { enabled };
  const a = new AllStop(
    states,
    ctl,
    () => on.enabled,
    () => t,
  );
  const k = (rank: number): RankKey => ({ session: 's', rank });
  return {
    a,
    states,
    calls,
    k,
    on,
    tick: (ms: number) => {
      t += ms;
    },
  };
}
const flush = () => new Promise((r) => setImmediate(r));

test('one rank stops at a breakpoint: every other attached rank is paused, once', async () => {
  const { a, states, calls, k } = setup();
  a.stopped(k(0), 'breakpoint', 7, { file: 't.py', line: 3 });
  await flush();
  assert.deepEqual(calls, ['pause 1', 'pause 2']);
  assert.equal(states.get(k(1))?.state, 'pausing');
  // The pauses land: reason "pause"; no further propagation (no feedback loop).
  a.stopped(k(1), 'pause', 11);
  a.stopped(k(2), 'pause', 12);
  await flush();
  assert.deepEqual(calls, ['pause 1', 'pause 2']);
  assert.deepEqual(
    [0, 1, 2].map((r) => states.get(k(r))?.reason),
    ['breakpoint', 'pause', 'pause'],
  );
});

test('a session whose ranks do all-stop themselves: states are tracked, nothing is sent from here', async () => {
  const { a, states, calls, k } = setup();
  const ctl = (a as unknown as { ctl: RankControl }).ctl;
  ctl.ranksDoIt = (session) => session === 's';
  a.stopped(k(0), 'breakpoint', 7, { file: 't.py', line: 3 });
  a.stopped(k(1), 'pause', 11); // paused by the ranks' all-stop
  await flush();
  assert.deepEqual(calls, []);
  assert.deepEqual(
    [0, 1].map((r) => states.get(k(r))?.state),
    ['stopped', 'stopped'],
  );
  a.continued(k(0)); // the ranks continue rank 1 themselves
  await flush();
  assert.deepEqual(calls, []);
  assert.equal(states.get(k(0))?.state, 'running');
  // the explicit commands still act: Pause All Ranks / Continue All Ranks
  assert.deepEqual(a.continueAll('s'), [1]);
});

test('continue on one rank continues the others; their own continued events do not echo', async () => {
  const { a, states, calls, k } = setup();
  a.stopped(k(0), 'breakpoint', 7);
  a.stopped(k(1), 'pause', 11);
  a.stopped(k(2), 'pause', 12);
  calls.length = 0;
  a.continued(k(0)); // the user's Continue on rank 0 (seen as a `continue` request)
  a.continued(k(0)); // debugpy's `continued` event for the same resume
  await flush();
  assert.deepEqual(calls, ['continue 1 thread 11', 'continue 2 thread 12']);
  a.continued(k(1));
  a.continued(k(2));
  await flush();
  assert.equal(calls.length, 2);
  assert.deepEqual(
    [0, 1, 2].map((r) => states.get(k(r))?.state),
    ['running', 'running', 'running'],
  );
});

test('a user pause on one rank pauses the others; an exception too', async () => {
  const { a, calls, k } = setup([0, 1]);
  a.stopped(k(1), 'pause', 5);
  await flush();
  assert.deepEqual(calls, ['pause 0']);
});

test('all-stop off: a stop does not pause the others, a continue does not continue them', async () => {
  const { a, calls, k } = setup([0, 1], false);
  a.stopped(k(0), 'breakpoint', 1);
  a.stopped(k(1), 'breakpoint', 2);
  a.continued(k(0));
  await flush();
  assert.deepEqual(calls, []);
});

test('a rank blocked in a collective: overdue after the delay; continued before it stopped → resumed when the pause lands', async () => {
  const { a, states, calls, k, tick } = setup([0, 1]);
  a.stopped(k(0), 'breakpoint', 7);
  tick(500);
  assert.deepEqual(a.overdue(1500), []);
  tick(1100);
  assert.deepEqual(a.overdue(1500), [k(1)]);
  states.update(k(1), { blockedAt: { file: 'c10d.py', line: 9, function: 'all_reduce' } });
  assert.deepEqual(a.overdue(1500), [], 'asked once');
  a.continued(k(0)); // user continues rank 0 while rank 1 is still blocked
  await flush();
  assert.deepEqual(calls, ['pause 1']);
  a.stopped(k(1), 'pause', 21); // the collective returned, the stale pause lands
  await flush();
  assert.deepEqual(calls, ['pause 1', 'continue 1 thread 21']);
  assert.equal(states.get(k(1))?.state, 'running');
  assert.deepEqual(
    calls.filter((c) => c.startsWith('pause')),
    ['pause 1'],
    'no new all-stop from the stale pause',
  );
});

test('Pause All / Continue All: only running ranks are paused, only stopped ones continued', async () => {
  const { a, calls, k } = setup([0, 1, 2]);
  a.stopped(k(2), 'breakpoint', 3);
  await flush();
  calls.length = 0;
  a.stopped(k(0), 'pause', 1);
  a.stopped(k(1), 'pause', 2);
  assert.deepEqual(a.pauseOthers('s', undefined, 'Pause All'), []);
  assert.deepEqual(a.continueAll('s'), [0, 1, 2]);
  await flush();
  assert.deepEqual(calls, ['continue 0 thread 1', 'continue 1 thread 2', 'continue 2 thread 3']);
});

test('a failed pause returns the rank to running', async () => {
  const { states, k } = setup([0, 1]);
  const ctl: RankControl = {
    pause: async () => {
      throw new Error('gone');
    },
    resume: async () => {},
    attached: (s) => [0, 1].map((rank) => ({ session: s, rank })),
    log: () => {},
  };
  const b = new AllStop(states, ctl, () => true);
  b.stopped(k(0), 'breakpoint', 1);
  await flush();
  assert.equal(states.get(k(1))?.state, 'running');
});

test('a step on one rank runs it alone: no pause, no continue of the others', async () => {
  const { a, states, calls, k } = setup([0, 1]);
  a.stopped(k(0), 'breakpoint', 1);
  a.stopped(k(1), 'pause', 2);
  await flush();
  calls.length = 0;
  a.stepping(k(0));
  assert.equal(states.get(k(0))?.state, 'stepping');
  assert.equal(states.get(k(0))?.threadId, 1, 'the stepping thread is kept');
  a.stopped(k(0), 'step', 1); // the step ends: rank 1 is already stopped, nothing to pause
  a.continued(k(1)); // continue on rank 1 continues rank 0 (stopped again after its step)
  await flush();
  assert.deepEqual(calls, ['continue 0 thread 1']);
});

test('a rank that stops while another still steps does not pause it (its own step stops it); stops carry their time', async () => {
  const { a, states, calls, k, tick } = setup([0, 1]);
  a.stopped(k(0), 'breakpoint', 1);
  a.stopped(k(1), 'pause', 2);
  a.stepping(k(0));
  a.stepping(k(1));
  tick(250);
  a.stopped(k(1), 'step', 2);
  a.continued(k(0)); // a `continued` event while it steps is not a user's Continue
  await flush();
  assert.deepEqual(calls, ['pause 1']);
  assert.equal(states.get(k(0))?.state, 'stepping');
  assert.equal(states.get(k(1))?.stoppedAt, 1250);
});

test('Run to Next Collective: armed ranks stop at their collective one by one without pausing the others', async () => {
  const { a, states, calls, k } = setup([0, 1, 2]);
  a.stopped(k(0), 'breakpoint', 1);
  a.stopped(k(1), 'pause', 2);
  a.stopped(k(2), 'pause', 3);
  calls.length = 0;
  assert.deepEqual(a.runToCollective('s', [k(0), k(1), k(2)]), [0, 1, 2]);
  await flush();
  a.continued(k(0));
  a.continued(k(1));
  a.continued(k(2));
  a.stopped(k(1), 'breakpoint', 2); // rank 1 reaches its next collective first
  await flush();
  assert.deepEqual(calls, ['continue 0 thread 1', 'continue 1 thread 2', 'continue 2 thread 3'], 'no pause of 0 and 2');
  a.stopped(k(0), 'breakpoint', 1);
  a.stopped(k(2), 'breakpoint', 3);
  assert.deepEqual(
    [0, 1, 2].map((r) => states.get(k(r))?.state),
    ['stopped', 'stopped', 'stopped'],
  );
  a.continued(k(0)); // disarmed: the next stop is an ordinary all-stop again
  await flush();
  calls.length = 0;
  a.stopped(k(0), 'breakpoint', 1);
  await flush();
  assert.deepEqual(calls, ['pause 1', 'pause 2']);
});
