import * as assert from 'assert';
import { test } from 'node:test';
import { AllStop } from '../../src/attach/allstop/allStop';
import { Collective } from '../../src/registry/collectiveRecord';
import { CollectiveStepping, MAX_AUTO_STEPS, STEP_STUCK_MS, STOP_AT_NEXT_EXPR, stuckStep } from '../../src/collectives/collectiveStepping';
import { RankDebugStates, RankKey } from '../../src/attach/allstop/rankDebugState';

const T = 1_000_000;

test('stuckStep: a step running for STEP_STUCK_MS while a peer is stopped → step the stopped peers', () => {
  const stopped = { state: 'stopped' as const, threadId: 5 };
  const stepping = { state: 'stepping' as const, stepStartedAt: T };
  assert.equal(
    stuckStep(
      [
        { rank: 0, info: stepping },
        { rank: 1, info: stopped },
      ],
      T + STEP_STUCK_MS - 1,
    ),
    undefined,
  );
  const d = stuckStep(
    [
      { rank: 0, info: stepping },
      { rank: 1, info: stopped },
      { rank: 2, info: { state: 'running' } },
    ],
    T + STEP_STUCK_MS,
  )!;
  assert.deepEqual([d.stuck, d.peers], [0, [1]]);
  assert.equal(
    d.message,
    "rank 0's step has not returned after 1.5 s (a collective?) while rank 1 is stopped (all-stop): stepping it too so the collective completes",
  );
  assert.equal(
    stuckStep(
      [
        { rank: 0, info: stepping },
        { rank: 1, info: { state: 'running' } },
      ],
      T + 60_000,
    ),
    undefined,
    'no stopped peer: nothing to do',
  );
  assert.equal(
    stuckStep(
      [
        { rank: 0, info: stepping },
        { rank: 1, info: { state: 'stopped' } },
      ],
      T + 60_000,
    ),
    undefined,
    'a peer without a thread cannot step',
  );
  assert.equal(
    stuckStep(
      [
        { rank: 0, info: stepping },
        { rank: 1, info: stopped },
      ],
      T + STEP_STUCK_MS + 10,
      T + 100,
    ),
    undefined,
    'peers stepped just now: wait again',
  );
});

test('stuckStep: the record says the stepping rank entered a collective during the step → at once, named', () => {
  const c: Collective = { op: 'ALLREDUCE', seq: 12, state: 'entered', since: (T + 200) / 1000 };
  const d = stuckStep(
    [
      { rank: 0, info: { state: 'stepping', stepStartedAt: T }, collective: c },
      { rank: 1, info: { state: 'stopped', threadId: 5 } },
    ],
    T + 600,
  )!;
  assert.equal(
    d.message,
    "rank 0's step waits in ALLREDUCE #12 while rank 1 is stopped (all-stop): stepping it too so the collective completes",
  );
  const old: Collective = { ...c, since: (T - 60_000) / 1000 };
  assert.equal(
    stuckStep(
      [
        { rank: 0, info: { state: 'stepping', stepStartedAt: T }, collective: old },
        { rank: 1, info: { state: 'stopped', threadId: 5 } },
      ],
      T + 600,
    ),
    undefined,
    'a collective entered before the step is an old record',
  );
});

/** Fake ranks: the DAP requests each one got; stops are fed back as the tracker would. */
function setup(ranks = [0, 1], allStop = true) {
  const states = new RankDebugStates();
  let t = T;
  const calls: string[] = [];
  const notes: string[] = [];
  const fail = new Set<number>();
  const stop = new AllStop(
    states,
    {
      pause: async (k) => {
        calls.push(`pause ${k.rank}`);
      },
      resume: async (k, th) => {
        calls.push(`continue ${k.rank} thread ${th}`);
      },
      attached: (s) => ranks.map((rank) => ({ session: s, rank })),
      log: () => {},
    },
    () => t,
  );
  const stepping = new CollectiveStepping(
    states,
    stop,
    {
      attached: (s) => ranks.map((rank) => ({ session: s, rank })),
      request: async (k: RankKey, command, args) => {
        calls.push(`${command} ${k.rank} ${JSON.stringify(args)}`);
        if (command === 'stackTrace') return { stackFrames: [{ id: 100 + k.rank }] };
        if (command === 'evaluate' && fail.has(k.rank)) throw new Error("No module named 'rtdebug.rank.collectives.recorder'");
        return {};
      },
      collective: () => undefined,
      allStopOn: () => allStop,
      notify: (m, first) => notes.push(`${first ? 'first: ' : ''}${m}`),
      log: () => {},
    },
    () => t,
  );
  const k = (rank: number) => ({ session: 's', rank });
  return {
    states,
    stop,
    stepping,
    calls,
    notes,
    fail,
    k,
    tick: (ms: number) => {
      t += ms;
    },
  };
}
const flush = () => new Promise((r) => setImmediate(r));

test('Step All Ranks: `next` on the stopped thread of every stopped rank, at once; they are stepping', async () => {
  const { stop, stepping, calls, states, k } = setup([0, 1, 2]);
  stop.stopped(k(0), 'breakpoint', 7);
  stop.stopped(k(1), 'pause', 8);
  await flush();
  calls.length = 0;
  assert.deepEqual(await stepping.stepAll('s'), [0, 1]);
  assert.deepEqual(calls, ['next 0 {"threadId":7}', 'next 1 {"threadId":8}']);
  assert.deepEqual(
    [0, 1].map((r) => states.get(k(r))?.state),
    ['stepping', 'stepping'],
  );
});

test('the stuck-step rule steps the stopped peer once per interval, tells the user once, and gives up after MAX_AUTO_STEPS', async () => {
  const { stop, stepping, calls, notes, k, tick } = setup([0, 1]);
  stop.stopped(k(0), 'breakpoint', 7);
  stop.stopped(k(1), 'pause', 8);
  await flush();
  stop.stepping(k(0)); // the user's Step Over in rank 0, on an all_reduce line
  calls.length = 0;
  tick(STEP_STUCK_MS);
  stepping.check();
  await flush();
  assert.deepEqual(calls, ['next 1 {"threadId":8}']);
  assert.equal(notes.length, 1);
  assert.match(notes[0], /^first: rank 0's step has not returned after 1\.5 s/);
  for (let i = 1; i < MAX_AUTO_STEPS + 5; i++) {
    stop.stopped(k(1), 'step', 8);
    tick(STEP_STUCK_MS);
    stepping.check();
    await flush();
  }
  assert.equal(calls.length, MAX_AUTO_STEPS);
  assert.equal(notes.length, 2);
  assert.match(notes[1], /still waits after its peers were stepped 20 times/);
  stop.stopped(k(0), 'step', 7); // the step finally returns: a new episode may step again, told in the status bar only
  stepping.check();
  stop.stepping(k(0));
  tick(STEP_STUCK_MS);
  stepping.check();
  await flush();
  assert.equal(calls.length, MAX_AUTO_STEPS + 1);
  assert.doesNotMatch(notes[2], /^first/);
});

test('all-stop off: a long step is left alone', async () => {
  const { stop, stepping, calls, k, tick } = setup([0, 1], false);
  stop.stopped(k(0), 'breakpoint', 7);
  stop.stopped(k(1), 'breakpoint', 8);
  stop.stepping(k(0));
  calls.length = 0;
  tick(60_000);
  stepping.check();
  await flush();
  assert.deepEqual(calls, []);
});

test('Run to Next Collective arms every stopped rank in its top frame, then continues them; one unarmed rank continues nothing', async () => {
  const { stop, stepping, calls, k } = setup([0, 1]);
  stop.stopped(k(0), 'breakpoint', 7);
  stop.stopped(k(1), 'pause', 8);
  await flush();
  calls.length = 0;
  const r = await stepping.runToNextCollective('s');
  await flush();
  assert.deepEqual([r.armed, r.failed, r.continued], [[0, 1], [], [0, 1]]);
  const expr = JSON.stringify(STOP_AT_NEXT_EXPR);
  assert.deepEqual(calls.filter((c) => c.startsWith('evaluate')).sort(), [
    `evaluate 0 {"expression":${expr},"frameId":100,"context":"repl"}`,
    `evaluate 1 {"expression":${expr},"frameId":101,"context":"repl"}`,
  ]);
  assert.deepEqual(
    calls.filter((c) => c.startsWith('continue')),
    ['continue 0 thread 7', 'continue 1 thread 8'],
  );
  const b = setup([0, 1]);
  b.stop.stopped(b.k(0), 'breakpoint', 7);
  b.stop.stopped(b.k(1), 'pause', 8);
  b.fail.add(1);
  await flush();
  b.calls.length = 0;
  const r2 = await b.stepping.runToNextCollective('s');
  await flush();
  assert.deepEqual(
    [r2.armed, r2.failed, r2.continued],
    [[0], [{ rank: 1, error: "No module named 'rtdebug.rank.collectives.recorder'" }], []],
  );
  assert.deepEqual(
    b.calls.filter((c) => c.startsWith('continue')),
    [],
  );
});
