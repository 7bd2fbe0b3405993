import * as assert from 'assert';
import { test } from 'node:test';
import { AllStop } from '../../src/attach/allstop/allStop';
import { continuePlan, entryDebug, JobEntries, jobEntries } from '../../src/attach/allstop/continuePlan';
import { RankDebugStates, RankKey } from '../../src/attach/allstop/rankDebugState';
import { RankEntry } from '../../src/registry/registryModel';

type Entry = Pick<RankEntry, 'rank' | 'debug' | 'stop' | 'all_stop' | 'continue_all'>;
const on = { all_stop: true, continue_all: true };
const stopped = (rank: number, reason = 'breakpoint'): Entry => ({ rank, ...on, debug: { state: 'stopped', reason } });
const paused = (rank: number, by: number): Entry => ({ rank, ...on, debug: { state: 'paused', reason: 'all-stop', by } });
const ranks = (...r: number[]) => r.map((rank) => ({ rank }));

test('the rank whose stop paused the others gets the one continue; the ranks continue the rest', () => {
  const job = jobEntries([paused(0, 2), paused(1, 2), stopped(2), paused(3, 2)]);
  assert.deepEqual(continuePlan(ranks(0, 1, 2, 3), job), {
    first: 2,
    own: [],
    byRanks: [0, 1, 3],
    why: 'rank 2 (stopped: breakpoint) is continued, the ranks continue the others',
  });
  // two ranks stopped by themselves (a breakpoint on the same line): the one named by a paused rank first,
  // else the lowest; either continue sets the board running, and the other resumes itself
  const both = jobEntries([stopped(0), stopped(1, 'exception'), paused(2, 1)]);
  assert.equal(continuePlan(ranks(0, 1, 2), both).first, 1);
  const steps = jobEntries([stopped(0, 'step'), stopped(1, 'step')]); // Step All Ranks' stops
  assert.deepEqual([continuePlan(ranks(1, 0), steps).first, continuePlan(ranks(1, 0), steps).byRanks], [0, [1]]);
});

test("a rank's own Pause, a --stop-on stop or a one-shot stop sets nothing: each rank is continued from here", () => {
  const pauses = jobEntries([stopped(0, 'pause'), stopped(1, 'pause')]); // Pause All Ranks
  assert.deepEqual(continuePlan(ranks(0, 1), pauses), {
    own: [0, 1],
    byRanks: [],
    why: "no stop here set the ranks' all-stop (pauses, --stop-on or one-shot stops): each rank is continued here",
  });
  const stopOn = jobEntries([0, 1].map((rank) => ({ ...stopped(rank), stop: { kind: 'nonfinite' } as RankEntry['stop'] })));
  assert.deepEqual(continuePlan(ranks(0, 1), stopOn).own, [0, 1]);
  const oneShot = jobEntries([stopped(0), stopped(1)]); // Run to Next Collective's stops read `breakpoint`
  assert.deepEqual(
    continuePlan(
      [
        { rank: 0, quiet: true },
        { rank: 1, quiet: true },
      ],
      oneShot,
    ).own,
    [0, 1],
  );
  // a user's Pause of rank 1 while rank 0 is stopped at a breakpoint: rank 0's continue resumes rank 1 too
  const mixed = jobEntries([stopped(0), stopped(1, 'pause')]);
  assert.deepEqual([continuePlan(ranks(0, 1), mixed).first, continuePlan(ranks(0, 1), mixed).byRanks], [0, [1]]);
});

test('the stopped rank is not attached here: a rank paused by all-stop gets the continue (it ends the all-stop too)', () => {
  const job = jobEntries([stopped(0), paused(1, 0), paused(2, 0)]);
  assert.deepEqual(continuePlan(ranks(1, 2), job), {
    first: 1,
    own: [],
    byRanks: [2],
    why: 'rank 1 (paused by all-stop) is continued, the ranks continue the others',
  });
});

test('all-stop or continue-all off in the job, no entries, or a rank kept stopped: every rank is continued from here', () => {
  const off = (e: Partial<Entry>) =>
    jobEntries([
      { ...stopped(0), ...e },
      { ...paused(1, 0), ...e },
    ]);
  assert.deepEqual(continuePlan(ranks(0, 1), off({ continue_all: false })).own, [0, 1]);
  assert.match(continuePlan(ranks(0, 1), off({ continue_all: false })).why, /continue-all is off/);
  assert.match(continuePlan(ranks(0, 1), off({ all_stop: false })).why, /all-stop is off/);
  assert.deepEqual(continuePlan(ranks(0, 1), off({ continue_all: undefined })).own, [0, 1], 'an older harness: no continue_all');
  assert.deepEqual(continuePlan(ranks(0, 1), undefined).own, [0, 1]);
  assert.deepEqual(continuePlan(ranks(0, 1, 2), off({}), 0), {
    own: [1, 2],
    byRanks: [],
    why: 'rank 0 stays stopped: each other rank is continued here',
  });
  // the job was turned on through one rank: that entry alone says so
  assert.equal(continuePlan(ranks(0, 1), jobEntries([stopped(0), { ...paused(1, 0), all_stop: false }])).first, 0);
  assert.deepEqual(continuePlan([], off({})), { own: [], byRanks: [], why: 'no stopped rank' });
});

test("entries are the rank's to write: forged debug fields are read as absent", () => {
  assert.deepEqual(entryDebug({ debug: { state: 3, reason: ['x'], by: 1.5 } }), {
    state: undefined,
    reason: undefined,
    by: undefined,
    stopOn: false,
  });
  assert.deepEqual(entryDebug({ debug: 'stopped' as unknown as RankEntry['debug'], stop: null }), {
    state: undefined,
    reason: undefined,
    by: undefined,
    stopOn: false,
  });
  const forged = jobEntries([
    {
      rank: 0,
      all_stop: 'yes' as unknown as boolean,
      continue_all: 1 as unknown as boolean,
      debug: { state: 'stopped', reason: 'breakpoint' },
    },
  ]);
  assert.deepEqual([forged.allStop, forged.continueAll], [false, false]);
});

/** AllStop's Continue All with fake ranks: the `continue` requests sent, the tracker's events fed back. */
function setup(job: () => JobEntries | undefined, settleMs = 100) {
  const states = new RankDebugStates();
  const calls: string[] = [];
  const log: string[] = [];
  const a = new AllStop(
    states,
    {
      pause: async () => {},
      resume: async (k, thread) => {
        calls.push(`continue ${k.rank} thread ${thread}`);
      },
      attached: (session) => [0, 1, 2].map((rank) => ({ session, rank })),
      job,
      log: (l) => log.push(l),
    },
    undefined,
    settleMs,
  );
  const k = (rank: number): RankKey => ({ session: 's', rank });
  return { a, states, calls, log, k };
}

test('Continue All through the ranks: one continue; the ranks resume the others, and a new stop of theirs is left alone', async () => {
  const { a, states, calls, k } = setup(() => jobEntries([paused(0, 1), stopped(1), paused(2, 1)]), 60_000);
  a.stopped(k(0), 'pause', 10);
  a.stopped(k(1), 'breakpoint', 11);
  a.stopped(k(2), 'pause', 12);
  assert.deepEqual(a.continueAll('s'), [0, 1, 2]);
  assert.deepEqual(calls, ['continue 1 thread 11']);
  assert.deepEqual(
    [0, 1, 2].map((r) => states.get(k(r))?.state),
    ['stopped', 'continuing', 'stopped'],
  );
  a.continued(k(0)); // the ranks resume rank 0 and rank 2: their `continued` events
  a.continued(k(2));
  a.stopped(k(2), 'breakpoint', 12); // rank 2 at a breakpoint again within milliseconds: not continued past it
  await a.continuing; // done at once (all left their stop), not after the 60 s given to the ranks
  assert.deepEqual(calls, ['continue 1 thread 11']);
  assert.equal(states.get(k(2))?.state, 'stopped');
});

test('Continue All through the ranks: a rank they leave at the same stop is continued from here after the wait', async () => {
  const { a, states, calls, log, k } = setup(() => jobEntries([stopped(0), paused(1, 0), paused(2, 0)]));
  a.stopped(k(0), 'breakpoint', 10);
  a.stopped(k(1), 'pause', 11);
  a.stopped(k(2), 'pause', 12);
  a.continueAll('s');
  a.continued(k(1));
  await a.continuing;
  assert.deepEqual(calls, ['continue 0 thread 10', 'continue 2 thread 12']);
  assert.ok(log.includes("rtdebug: rank(s) 2 not continued by the ranks' all-stop: continuing them from here"), log.join('\n'));
  assert.equal(states.get(k(2))?.state, 'running');
});

test('Continue All through the ranks: the first continue fails → the others are continued from here at once', async () => {
  const states = new RankDebugStates();
  const calls: string[] = [];
  const a = new AllStop(
    states,
    {
      pause: async () => {},
      resume: async (k) => {
        calls.push(`continue ${k.rank}`);
        if (k.rank === 0) throw new Error('gone');
      },
      attached: (session) => [0, 1].map((rank) => ({ session, rank })),
      job: () => jobEntries([stopped(0), paused(1, 0)]),
      log: () => {},
    },
    undefined,
    60_000,
  );
  a.stopped({ session: 's', rank: 0 }, 'breakpoint', 1);
  a.stopped({ session: 's', rank: 1 }, 'pause', 2);
  a.continueAll('s');
  await a.continuing;
  assert.deepEqual(calls, ['continue 0', 'continue 1']);
});
