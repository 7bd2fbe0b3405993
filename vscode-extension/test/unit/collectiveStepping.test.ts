import * as assert from 'assert';
import { test } from 'node:test';
import { AllStop } from '../../src/attach/allstop/allStop';
import { CollectiveStepping, STOP_AT_NEXT_EXPR } from '../../src/collectives/collectiveStepping';
import { RankDebugStates, RankKey } from '../../src/attach/allstop/rankDebugState';
import { JobEntries, jobEntries } from '../../src/attach/allstop/continuePlan';

/** Fake ranks: the DAP requests each one got; stops are fed back as the tracker would; `job`: their entries. */
function setup(ranks = [0, 1], job?: () => JobEntries) {
  const states = new RankDebugStates();
  const calls: string[] = [];
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
      job,
      log: () => {},
    },
    undefined,
    50,
  );
  const stepping = new CollectiveStepping(states, stop, {
    attached: (s) => ranks.map((rank) => ({ session: s, rank })),
    request: async (k: RankKey, command, args) => {
      calls.push(`${command} ${k.rank} ${JSON.stringify(args)}`);
      if (command === 'stackTrace') return { stackFrames: [{ id: 100 + k.rank }] };
      if (command === 'evaluate' && fail.has(k.rank)) throw new Error("No module named 'rtdebug.rank.collectives.recorder'");
      return {};
    },
    log: () => {},
  });
  const k = (rank: number) => ({ session: 's', rank });
  return { states, stop, stepping, calls, fail, k };
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

test('Run to Next Collective where the ranks continue each other: one continue; the stops at the collective set nothing, so the next Continue All sends one to each', async () => {
  let entries = jobEntries([
    { rank: 0, all_stop: true, continue_all: true, debug: { state: 'stopped', reason: 'breakpoint' } },
    { rank: 1, all_stop: true, continue_all: true, debug: { state: 'paused', reason: 'all-stop', by: 0 } },
  ]);
  const { stop, stepping, calls, states, k } = setup([0, 1], () => entries);
  stop.stopped(k(0), 'breakpoint', 7);
  stop.stopped(k(1), 'pause', 8);
  const r = await stepping.runToNextCollective('s');
  stop.continued(k(1)); // the ranks resume rank 1: its `continued` event
  await stop.continuing;
  assert.deepEqual(r.continued, [0, 1]);
  assert.deepEqual(
    calls.filter((c) => c.startsWith('continue')),
    ['continue 0 thread 7'],
  );
  // each stops at its collective by itself (the one-shot stop, reason breakpoint, as its entry says)
  stop.stopped(k(1), 'breakpoint', 8);
  stop.stopped(k(0), 'breakpoint', 7);
  assert.deepEqual([states.get(k(0))?.quiet, states.get(k(1))?.quiet], [true, true]);
  entries = jobEntries([
    { rank: 0, all_stop: true, continue_all: true, debug: { state: 'stopped', reason: 'breakpoint' } },
    { rank: 1, all_stop: true, continue_all: true, debug: { state: 'stopped', reason: 'breakpoint' } },
  ]);
  calls.length = 0;
  stop.continueAll('s');
  await stop.continuing;
  assert.deepEqual(calls, ['continue 0 thread 7', 'continue 1 thread 8']);
  stop.stopped(k(0), 'breakpoint', 7); // a later stop of its own is no longer taken for the one-shot one
  assert.equal(states.get(k(0))?.quiet, undefined);
});
