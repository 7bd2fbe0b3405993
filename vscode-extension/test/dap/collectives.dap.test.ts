import * as assert from 'assert';
import * as path from 'path';
import { test } from 'node:test';
import { collectiveSummary } from '../../src/ranks/collectiveText';
import { harnessPython, REPO_ROOT, EXT_ROOT } from '../unit/helpers';
import { markerLine, withTimeout } from './dapHelpers';
import { lineOf, RankJob } from './rankJob';

/**
 * Stepping that knows collectives (issue 21), against real debugpy ranks of a real 2-rank gloo
 * `rtdebug torchrun` job, all-stop done by the ranks (set through the extension's jobAllStop), with the
 * extension's AllStop + CollectiveStepping: Step All Ranks over an
 * all_reduce line completes in every rank; with all-stop on, a Step Over in ONE rank on that line does not
 * freeze the session (the stuck-step rule steps the stopped peer); Run All Ranks to Next Collective stops
 * each rank at its next collective, and `rtdebug ps --json` (what the Ranks view lists) shows each rank's
 * op and seq: the same in a healthy loop, different in the hang example.
 */
const python = harnessPython();
const skip = !python && 'no harness interpreter';
const LOOP = path.join(EXT_ROOT, 'test', 'fixtures', 'jobs', 'coll_loop.py');

test('Step All Ranks, the stuck-step rule and Run to Next Collective on a healthy all_reduce loop', { skip, timeout: 400000 }, async () => {
  const L = markerLine(LOOP, 'coll all_reduce');
  const job = new RankJob(python!, LOOP, ['--steps', '4', '--sleep', '0'], { file: LOOP, line: L });
  try {
    await job.start();
    // all-stop off (the job starts with --no-all-stop) while both ranks reach the breakpoint (iteration 0), so
    // each stops there and not at a pause
    await Promise.all([job.stop(0, 0), job.stop(1, 0)]);
    assert.deepEqual([(await job.where(0)).line, (await job.where(1)).line], [L, L]);
    await job.setAllStop(true);

    // 1. Step All Ranks: `next` in both at once; the all_reduce completes in every rank
    assert.deepEqual(await job.stepping.stepAll(job.sessionId), [0, 1]);
    const [s0, s1] = await Promise.all([job.stop(0, 1, 60000), job.stop(1, 1, 60000)]);
    assert.deepEqual([s0.body.reason, s1.body.reason], ['step', 'step']);
    for (const r of [0, 1])
      assert.deepEqual(
        await job.where(r, 't[0].item()'),
        { line: L + 1, file: LOOP, value: '2.0' },
        `rank ${r} stepped over the all_reduce`,
      );

    // 2. all-stop on, the user steps over the all_reduce in rank 0 only: its step waits for rank 1, which is
    //    stopped; the rule steps rank 1 too and both complete (no frozen session)
    //    (all-stop off meanwhile, so each rank reaches the breakpoint again by itself: turning it off lets go of
    //    the rank the ranks hold, rank 1 here, which took part in the last stop; Continue All sends rank 0 on)
    await job.setAllStop(false);
    await job.stop(1, 2); // the breakpoint again, iteration 1
    job.allStop.continueAll(job.sessionId, 1);
    await job.stop(0, 2);
    await job.setAllStop(true);
    job.allStop.stepping(job.k(0)); // what the tracker does when VS Code sends the user's `next`
    await job.dc(job.k(0)).send('next', { threadId: job.states.get(job.k(0))!.threadId });
    const t0 = Date.now();
    const [u0, u1] = await Promise.all([job.stop(0, 3, 60000), job.stop(1, 3, 60000)]);
    assert.deepEqual([u0.body.reason, u1.body.reason], ['step', 'step']);
    for (const r of [0, 1]) assert.equal((await job.where(r)).line, L + 1, `rank ${r} is past the all_reduce`);
    assert.equal(job.notes.length, 1, job.log.join('\n'));
    assert.match(
      job.notes[0],
      /^rank 0's step has not returned after \d+\.\d s \(a collective\?\) while rank 1 is stopped \(all-stop\): stepping it too so the collective completes$/,
    );
    console.error(`[dap-coll] single-rank step over all_reduce completed in both ranks after ${Date.now() - t0} ms`);

    // 3. Run All Ranks to Next Collective: both stop at the next all_reduce (iteration 2) before it runs
    await job.clearBreakpoints();
    const armed = await job.stepping.runToNextCollective(job.sessionId);
    assert.deepEqual([armed.armed, armed.failed], [[0, 1], []]);
    await Promise.all([job.stop(0, 4), job.stop(1, 4)]);
    for (const r of [0, 1]) assert.equal((await job.where(r)).line, L, `rank ${r} stopped at its next collective's line`);
    const ps = await job.ps();
    const pos = ps.ranks.map((r) => [r.rank, r.collective?.op, r.collective?.seq, r.collective?.state, r.collective?.line]);
    assert.deepEqual(pos, [
      [0, 'ALLREDUCE', 3, 'entered', L],
      [1, 'ALLREDUCE', 3, 'entered', L],
    ]);
    assert.deepEqual(collectiveSummary(ps.ranks), { text: 'all at ALLREDUCE #3', differ: false });

    job.allStop.continueAll(job.sessionId);
    assert.equal(await withTimeout(job.ended, 120000, 'timeout'), 'job exited with code 0', job.log.slice(-15).join('\n'));
  } finally {
    await job.close();
  }
});

test(
  'Run to Next Collective on the hang example: rank 0 stops in ALLREDUCE, rank 1 in BARRIER, same seq: the mismatch is shown',
  { skip, timeout: 400000 },
  async () => {
    const HANG = path.join(REPO_ROOT, 'examples', 'hang.py');
    const at = lineOf(HANG, 'steps done');
    const job = new RankJob(python!, HANG, ['--steps', '2'], { file: HANG, line: at });
    try {
      await job.start();
      await Promise.all([job.stop(0, 0), job.stop(1, 0)]);
      await job.setAllStop(true);
      await job.clearBreakpoints();
      const armed = await job.stepping.runToNextCollective(job.sessionId);
      assert.deepEqual([armed.armed, armed.failed], [[0, 1], []]);
      await Promise.all([job.stop(0, 1), job.stop(1, 1)]);
      assert.equal((await job.where(0)).line, markerLine(HANG, 'hang all_reduce'));
      assert.equal((await job.where(1)).line, markerLine(HANG, 'hang barrier'));
      const ps = await job.ps();
      assert.deepEqual(
        ps.ranks.map((r) => [r.rank, r.collective?.op, r.collective?.seq]),
        [
          [0, 'ALLREDUCE', 3],
          [1, 'BARRIER', 3],
        ],
      );
      assert.deepEqual(collectiveSummary(ps.ranks), { text: 'collectives differ: rank 0 ALLREDUCE #3 · rank 1 BARRIER #3', differ: true });
    } finally {
      await job.close(); // the job would hang: ending the session ends it
    }
  },
);
