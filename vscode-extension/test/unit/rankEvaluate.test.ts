import * as assert from 'assert';
import { test } from 'node:test';
import { AllStop, RankControl } from '../../src/attach/allstop/allStop';
import { RankDebugStates, RankKey } from '../../src/attach/allstop/rankDebugState';
import { evaluateInAll, HoldOptions } from '../../src/attach/allstop/rankEvaluate';

/**
 * One expression in every rank at one moment (Stop All Ranks When…): the running ranks paused together,
 * evaluated when ALL have stopped, continued together; a rank the user stopped stays stopped; a rank whose
 * pause cannot land (it waits in a collective for a rank already stopped) makes all of them go and try
 * again, and nothing is evaluated unless every rank stopped. Fake ranks answer as debugpy would; their
 * stops come back as the tracker feeds them.
 */
const FAST: HoldOptions = { landMs: 40, attempts: 3, settleMs: 300 };

function setup(ranks = [0, 1, 2]) {
  const states = new RankDebugStates();
  const calls: string[] = [];
  /** ranks whose pause lands only once rank 0 has been continued (they wait for it in a collective) */
  const blockedBy0 = new Set<number>();
  let blockedTries = Infinity;
  const pending = new Set<number>();
  const k = (rank: number): RankKey => ({ session: 's', rank });
  const land = (r: number) => {
    pending.delete(r);
    a.stopped(k(r), 'pause', 10 + r);
  };
  const ctl: RankControl = {
    pause: async (key) => {
      calls.push(`pause ${key.rank}`);
      if (blockedBy0.has(key.rank) && blockedTries-- > 0) pending.add(key.rank);
      else setImmediate(() => land(key.rank));
    },
    resume: async (key, thread) => {
      calls.push(`continue ${key.rank} thread ${thread}`);
      if (key.rank === 0) for (const r of [...pending]) setImmediate(() => land(r)); // its collective completes
    },
    attached: (session) => ranks.map((rank) => ({ session, rank })),
    log: () => {},
  };
  const a = new AllStop(states, ctl);
  const request = async (key: RankKey, command: string, args: Record<string, unknown>) => {
    calls.push(`${command} ${key.rank} ${JSON.stringify(args)}`);
    if (command === 'stackTrace') return { stackFrames: [{ id: 100 + key.rank }] };
    return { result: `'rtdebug: rank ${key.rank} stops on nonfinite'` };
  };
  const run = (rs = ranks) => evaluateInAll(states, a, { request }, rs.map(k), 'X', FAST);
  const setBlocked = (r: number, tries: number) => {
    blockedBy0.add(r);
    blockedTries = tries;
  };
  return { a, states, calls, k, run, setBlocked };
}
const flush = () => new Promise((r) => setTimeout(r, 5));

test('running ranks: all paused, evaluated once every one stopped, continued together; nobody all-stopped', async () => {
  const { states, calls, k, run } = setup([0, 1]);
  const r = await run();
  await flush();
  assert.ok(r.ok);
  assert.deepEqual(
    [...r.results],
    [
      [0, { value: "'rtdebug: rank 0 stops on nonfinite'" }],
      [1, { value: "'rtdebug: rank 1 stops on nonfinite'" }],
    ],
  );
  const order = calls.map((c) => c.split(' ').slice(0, 2).join(' '));
  assert.deepEqual(order.slice(0, 2), ['pause 0', 'pause 1']);
  assert.ok(order.indexOf('evaluate 0') > order.indexOf('pause 1') && order.indexOf('evaluate 1') > order.indexOf('pause 1'));
  assert.deepEqual(order.slice(-2).sort(), ['continue 0', 'continue 1']);
  assert.ok(calls.includes('evaluate 1 {"expression":"X","frameId":101,"context":"repl"}'));
  assert.equal(calls.filter((c) => c.startsWith('pause')).length, 2, 'their stops paused nobody else');
  for (const r of [0, 1]) assert.equal(states.get(k(r))?.state, 'running');
});

test('a rank the user stopped is evaluated where it is and stays stopped; only the ones paused here go on', async () => {
  const { a, states, calls, k, run } = setup([0, 1]);
  a.stopped(k(0), 'breakpoint', 7);
  a.stopped(k(1), 'pause', 11); // the ranks' all-stop pauses rank 1 for it…
  await flush();
  assert.equal(states.get(k(1))?.state, 'stopped');
  a.continueAll('s', 0); // …and the user continues rank 1 only (rank 0 stays at its breakpoint)
  a.continued(k(1));
  calls.length = 0;
  const r = await run();
  await flush();
  assert.ok(r.ok);
  assert.deepEqual(
    calls.filter((c) => !c.startsWith('stackTrace') && !c.startsWith('evaluate')),
    ['pause 1', 'continue 1 thread 11'],
  );
  assert.equal(states.get(k(0))?.state, 'stopped');
  assert.ok(calls.includes('stackTrace 0 {"threadId":7,"startFrame":0,"levels":1}'));
});

test('a rank that waits in a collective for a stopped one: all go, its late pause is resumed, and the next try holds them all', async () => {
  const { states, calls, k, run, setBlocked } = setup([0, 1]);
  setBlocked(1, 1); // the first pause of rank 1 lands only once rank 0 runs again
  const r = await run();
  await flush();
  assert.ok(r.ok, JSON.stringify(r));
  const seq = calls.filter((c) => !c.startsWith('stackTrace')).map((c) => c.split(' ').slice(0, 2).join(' '));
  assert.deepEqual(
    seq.slice(0, 4),
    ['pause 0', 'pause 1', 'continue 0', 'continue 1'],
    'try 1: let go (rank 1 resumed as its pause landed)',
  );
  assert.deepEqual(seq.slice(4, 6), ['pause 0', 'pause 1'], 'try 2');
  assert.equal(seq.filter((c) => c.startsWith('evaluate')).length, 2, 'evaluated once, in the try where both stopped');
  for (const r of [0, 1]) assert.equal(states.get(k(r))?.state, 'running');
});

test('never all stopped: nothing evaluated, every rank going again, and why', async () => {
  const { states, calls, k, run, setBlocked } = setup([0, 1, 2]);
  setBlocked(2, Infinity);
  const r = await run();
  await flush();
  assert.deepEqual(r, {
    ok: false,
    error: 'rank 2 did not stop with the others in 3 tries (in C code: waiting in a collective for a rank already stopped?)',
  });
  assert.ok(!calls.some((c) => c.startsWith('evaluate')));
  await flush();
  for (const r of [0, 1, 2]) assert.equal(states.get(k(r))?.state, 'running');
});

test('a rank in the middle of a step is waited for; one that never settles is said', async () => {
  const { a, run, k } = setup([0, 1]);
  a.stepping(k(1));
  assert.deepEqual(await run(), { ok: false, error: 'rank 1 is still stepping after 0.3 s' });
});

test('a breakpoint that lands instead of the pause is a real stop: kept; the rank paused only to evaluate goes on', async () => {
  const { a, states, calls, k, run, setBlocked } = setup([0, 1]);
  setBlocked(1, 1);
  const p = run();
  await new Promise((r) => setTimeout(r, 10));
  a.stopped(k(1), 'breakpoint', 21); // rank 1 reaches the user's breakpoint before the pause lands
  const r = await p;
  await flush();
  assert.ok(r.ok);
  // rank 0 was stopped only for the evaluate: continued (the ranks' all-stop holds it at its next collective)
  assert.deepEqual(
    calls.filter((c) => c.startsWith('continue')),
    ['continue 0 thread 10'],
  );
  assert.deepEqual(
    [0, 1].map((r) => states.get(k(r))?.state),
    ['running', 'stopped'],
  );
});
