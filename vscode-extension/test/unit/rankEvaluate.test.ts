import * as assert from 'assert';
import { test } from 'node:test';
import { AllStop, RankControl } from '../../src/attach/allStop';
import { RankDebugStates, RankKey } from '../../src/attach/rankDebugState';
import { evaluateInRank } from '../../src/attach/rankEvaluate';

/**
 * Evaluating in a rank whatever it does (Stop All Ranks When…): a stopped rank is evaluated where it is; a
 * running one is paused, evaluated in its top frame and continued, and its stop pauses nobody (all-stop on).
 * Fake ranks answer as debugpy would; their stops are fed back as the tracker does.
 */
function setup(ranks = [0, 1, 2]) {
  const states = new RankDebugStates();
  const calls: string[] = [];
  const landing = new Map<number, () => void>();
  const ctl: RankControl = {
    pause: async (k) => {
      calls.push(`pause ${k.rank}`);
      const land = () => a.stopped(k, 'pause', 10 + k.rank);
      landing.set(k.rank, land);
    },
    resume: async (k, thread) => {
      calls.push(`continue ${k.rank} thread ${thread}`);
    },
    attached: (session) => ranks.map((rank) => ({ session, rank })),
    log: () => {},
  };
  const a = new AllStop(states, ctl, () => true);
  const request = async (k: RankKey, command: string, args: Record<string, unknown>) => {
    calls.push(`${command} ${k.rank} ${JSON.stringify(args)}`);
    if (command === 'stackTrace') return { stackFrames: [{ id: 100 + k.rank }] };
    return { result: `'rtdebug: rank ${k.rank} stops on nonfinite'` };
  };
  return { a, states, calls, landing, request, k: (rank: number): RankKey => ({ session: 's', rank }) };
}
const flush = () => new Promise((r) => setImmediate(r));

test('a running rank: paused, evaluated in the top frame of the stopped thread, continued; nobody else paused', async () => {
  const { a, states, calls, landing, request, k } = setup();
  const p = evaluateInRank(states, a, { request }, k(1), 'X');
  await flush();
  assert.deepEqual(calls, ['pause 1']);
  landing.get(1)!();
  const r = await p;
  await flush();
  assert.deepEqual(r, { value: "'rtdebug: rank 1 stops on nonfinite'", paused: true });
  assert.deepEqual(calls, [
    'pause 1',
    'stackTrace 1 {"threadId":11,"startFrame":0,"levels":1}',
    'evaluate 1 {"expression":"X","frameId":101,"context":"repl"}',
    'continue 1 thread 11',
  ]);
  // the continue we sent comes back from the tracker as a request: not the user's, nothing propagates
  a.continued(k(1));
  assert.equal(states.get(k(1))?.state, 'running');
  assert.ok(!calls.some((c) => c.startsWith('pause 0') || c.startsWith('continue 0')));
});

test('a stopped rank is evaluated where it is and stays stopped', async () => {
  const { a, states, calls, request, k } = setup();
  a.stopped(k(0), 'breakpoint', 7);
  await flush();
  calls.length = 0;
  const r = await evaluateInRank(states, a, { request }, k(0), 'X');
  assert.equal(r.paused, undefined);
  assert.deepEqual(calls, [
    'stackTrace 0 {"threadId":7,"startFrame":0,"levels":1}',
    'evaluate 0 {"expression":"X","frameId":100,"context":"repl"}',
  ]);
  assert.equal(states.get(k(0))?.state, 'stopped');
});

test('a pause that does not land in time (a collective) is given up, and resumed at once when it lands later', async () => {
  const { a, states, calls, landing, request, k } = setup();
  const r = await evaluateInRank(states, a, { request }, k(2), 'X', 30);
  assert.equal(r.error, 'did not stop within 0 s (in C code: a collective?)');
  landing.get(2)!();
  await flush();
  assert.deepEqual(calls, ['pause 2', 'continue 2 thread 12']);
  assert.ok(!calls.some((c) => c.startsWith('evaluate')));
});

test('a real stop while the brief pause is pending (a breakpoint) is kept and all-stops the others', async () => {
  const { a, states, calls, request, k } = setup();
  const p = evaluateInRank(states, a, { request }, k(1), 'X');
  await flush();
  a.stopped(k(1), 'breakpoint', 11);
  await p;
  await flush();
  assert.equal(states.get(k(1))?.state, 'stopped');
  assert.ok(calls.includes('pause 0') && calls.includes('pause 2'), calls.join('; '));
  assert.ok(!calls.includes('continue 1 thread 11'), 'the rank at its breakpoint is not continued');
});

test('an all-stop while a rank is briefly paused keeps it stopped', async () => {
  const { a, states, calls, landing, request, k } = setup();
  const p = evaluateInRank(states, a, { request }, k(1), 'X');
  await flush();
  a.stopped(k(0), 'breakpoint', 7); // rank 0 hits a breakpoint: all-stop wants rank 1 stopped too
  landing.get(1)!();
  await p;
  await flush();
  assert.equal(states.get(k(1))?.state, 'stopped');
  assert.ok(!calls.some((c) => c.startsWith('continue 1')), calls.join('; '));
});
