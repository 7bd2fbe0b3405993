import * as assert from 'assert';
import { test } from 'node:test';
import { AllStop, RankControl } from '../../src/attach/allstop/allStop';
import { RankDebugStates, RankKey } from '../../src/attach/allstop/rankDebugState';

/** Fake ranks: what the coordinator asked each one, and the adapter's answers fed back as a tracker would. */
function setup(ranks = [0, 1, 2]) {
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
  const a = new AllStop(states, ctl, () => t);
  const k = (rank: number): RankKey => ({ session: 's', rank });
  return {
    a,
    states,
    calls,
    k,
    tick: (ms: number) => {
      t += ms;
    },
  };
}
const flush = () => new Promise((r) => setImmediate(r));

test('a stop pauses nobody from here (the ranks do all-stop): every state is tracked', async () => {
  const { a, states, calls, k } = setup();
  a.stopped(k(0), 'breakpoint', 7, { file: 't.py', line: 3 });
  a.stopped(k(1), 'pause', 11); // paused by the ranks' all-stop
  a.stopped(k(2), 'exception', 12);
  await flush();
  assert.deepEqual(calls, []);
  assert.deepEqual(
    [0, 1, 2].map((r) => [states.get(k(r))?.state, states.get(k(r))?.reason, states.get(k(r))?.threadId]),
    [
      ['stopped', 'breakpoint', 7],
      ['stopped', 'pause', 11],
      ['stopped', 'exception', 12],
    ],
  );
  assert.deepEqual(states.get(k(0))?.where, { file: 't.py', line: 3 });
});

test('a continue continues nobody from here: the others follow their own continued events', async () => {
  const { a, states, calls, k } = setup();
  a.stopped(k(0), 'breakpoint', 7);
  a.stopped(k(1), 'pause', 11);
  a.continued(k(0)); // the user's Continue on rank 0 (seen as a `continue` request)
  a.continued(k(0)); // debugpy's `continued` event for the same resume
  await flush();
  assert.deepEqual(calls, []);
  assert.deepEqual(
    [0, 1].map((r) => states.get(k(r))?.state),
    ['running', 'stopped'],
  );
  a.continued(k(1)); // the ranks continued it: its `continued` event
  assert.equal(states.get(k(1))?.state, 'running');
});

test('Pause All Ranks on a rank blocked in a collective: overdue after the delay; Continue All before it stopped → resumed when the pause lands', async () => {
  const { a, states, calls, k, tick } = setup([0, 1]);
  assert.deepEqual(a.pauseOthers('s', undefined, 'Pause All Ranks'), [0, 1]);
  a.stopped(k(0), 'pause', 7);
  tick(500);
  assert.deepEqual(a.overdue(1500), []);
  tick(1100);
  assert.deepEqual(a.overdue(1500), [k(1)]);
  states.update(k(1), { blockedAt: { file: 'c10d.py', line: 9, function: 'all_reduce' } });
  assert.deepEqual(a.overdue(1500), [], 'asked once');
  assert.deepEqual(a.continueAll('s'), [0]); // the user continues while rank 1 is still blocked
  await flush();
  assert.deepEqual(calls, ['pause 0', 'pause 1', 'continue 0 thread 7']);
  a.stopped(k(1), 'pause', 21); // the collective returned, the stale pause lands
  await flush();
  assert.deepEqual(calls, ['pause 0', 'pause 1', 'continue 0 thread 7', 'continue 1 thread 21']);
  assert.equal(states.get(k(1))?.state, 'running');
});

test('a breakpoint that lands instead of a stale pause is a real stop: kept', async () => {
  const { a, states, calls, k } = setup([0, 1]);
  a.pauseOthers('s', 0, 'Pause All Ranks');
  a.continueAll('s');
  a.stopped(k(1), 'breakpoint', 21);
  await flush();
  assert.deepEqual(calls, ['pause 1']);
  assert.equal(states.get(k(1))?.state, 'stopped');
});

test('Pause All / Continue All: only running ranks are paused, only stopped ones continued', async () => {
  const { a, calls, k } = setup([0, 1, 2]);
  a.stopped(k(2), 'breakpoint', 3);
  a.stopped(k(0), 'pause', 1);
  assert.deepEqual(a.pauseOthers('s', undefined, 'Pause All'), [1]);
  a.stopped(k(1), 'pause', 2);
  assert.deepEqual(a.pauseOthers('s', undefined, 'Pause All'), []);
  assert.deepEqual(a.continueAll('s'), [0, 1, 2]);
  await flush();
  assert.deepEqual(calls, ['pause 1', 'continue 0 thread 1', 'continue 1 thread 2', 'continue 2 thread 3']);
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
  const b = new AllStop(states, ctl);
  b.stopped(k(0), 'breakpoint', 1);
  assert.deepEqual(b.pauseOthers('s', 0, 'Pause All'), [1]);
  await flush();
  assert.equal(states.get(k(1))?.state, 'running');
});

test('a step on one rank runs it alone; stops carry their time', async () => {
  const { a, states, calls, k, tick } = setup([0, 1]);
  a.stopped(k(0), 'breakpoint', 1);
  a.stopped(k(1), 'pause', 2);
  a.stepping(k(0));
  assert.equal(states.get(k(0))?.state, 'stepping');
  assert.equal(states.get(k(0))?.threadId, 1, 'the stepping thread is kept');
  a.continued(k(0)); // a `continued` event while it steps is not a user's Continue
  assert.equal(states.get(k(0))?.state, 'stepping');
  tick(250);
  a.stopped(k(0), 'step', 1);
  await flush();
  assert.deepEqual(calls, []);
  assert.equal(states.get(k(0))?.stoppedAt, 1250);
});

test('Run to Next Collective: every stopped rank continued; their stops at the collective pause nobody', async () => {
  const { a, states, calls, k } = setup([0, 1, 2]);
  a.stopped(k(0), 'breakpoint', 1);
  a.stopped(k(1), 'pause', 2);
  assert.deepEqual(a.runToCollective('s'), [0, 1]);
  await flush();
  a.stopped(k(1), 'breakpoint', 2); // rank 1 reaches its next collective first
  a.stopped(k(0), 'breakpoint', 1);
  await flush();
  assert.deepEqual(calls, ['continue 0 thread 1', 'continue 1 thread 2']);
  assert.deepEqual(
    [0, 1, 2].map((r) => states.get(k(r))?.state),
    ['stopped', 'stopped', undefined],
  );
});

test("the ranks' all-stop pausing a rank blocked in a collective: shown pausing, then overdue; its stop or its continue ends it", async () => {
  const { a, states, calls, k, tick } = setup([0, 1]);
  a.stopped(k(0), 'breakpoint', 7);
  a.followEntry(k(1), true); // its entry says `pausing`: the ranks asked, it waits in C++
  assert.equal(states.get(k(1))?.state, 'pausing');
  tick(1600);
  assert.deepEqual(a.overdue(1500), [k(1)]);
  a.followEntry(k(1), true);
  a.stopped(k(1), 'pause', 21); // the collective returned: the ranks' pause landed
  assert.equal(states.get(k(1))?.state, 'stopped');
  a.followEntry(k(1), false);
  assert.equal(states.get(k(1))?.state, 'stopped', 'a stopped rank is left as it is');
  a.continued(k(1));
  a.followEntry(k(1), true);
  a.followEntry(k(1), false); // continued before the pause landed: its entry says running again
  assert.equal(states.get(k(1))?.state, 'running');
  a.followEntry(k(0), false);
  assert.equal(states.get(k(0))?.state, 'stopped');
  await flush();
  assert.deepEqual(calls, [], 'nothing sent: the ranks pause and continue');
});
