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
 * extension's AllStop + CollectiveStepping: Step All Ranks over an all_reduce line completes in every rank;
 * Continue All Ranks sends one `continue` and the ranks continue the other (continuePlan.ts), which then stops
 * again and stays stopped; with all-stop on, a Step Over in ONE rank on that line completes, the ranks letting
 * the paused peer go into the collective and pausing it again at the step's stop (nothing from here); Run All
 * Ranks to Next Collective stops each rank at its next collective, and `rtdebug ps --json` (what the Ranks view
 * lists) shows each rank's op and seq: the same in a healthy loop, different in the hang example.
 */
const python = harnessPython();
const skip = !python && 'no harness interpreter';
const LOOP = path.join(EXT_ROOT, 'test', 'fixtures', 'jobs', 'coll_loop.py');

test(
  "Step All Ranks, Continue All Ranks, one rank's step and Run to Next Collective on a healthy all_reduce loop",
  { skip, timeout: 400000 },
  async () => {
    const L = markerLine(LOOP, 'coll all_reduce');
    // --sleep: a rank paused by all-stop while running is in time.sleep, and stops when it returns
    const job = new RankJob(python!, LOOP, ['--steps', '4', '--sleep', '0.5'], { file: LOOP, line: L });
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

      // 2. Continue All Ranks, the ranks continuing each other: one `continue` (rank 0's), rank 1 resumed by the
      //    ranks; the first at the breakpoint again (iteration 1) pauses the other, and both stay stopped: nothing
      //    continued a rank past its stop
      const ps0 = await job.ps();
      assert.deepEqual(
        ps0.ranks.map((r) => [r.rank, r.debug?.state, r.debug?.reason, r.continue_all]),
        [
          [0, 'stopped', 'step', true],
          [1, 'stopped', 'step', true],
        ],
      );
      const sent = [0, 1].map((r) => job.continues.get(r) ?? 0);
      const seen = [job.stopCount(0), job.stopCount(1)];
      assert.deepEqual(job.allStop.continueAll(job.sessionId), [0, 1]);
      await job.allStop.continuing;
      const [c0, c1] = await Promise.all([job.stop(0, seen[0], 60000), job.stop(1, seen[1], 60000)]);
      assert.deepEqual(
        [0, 1].map((r) => (job.continues.get(r) ?? 0) - sent[r]),
        [1, 0],
        `one continue, to rank 0\n${job.log.slice(-5).join('\n')}`,
      );
      assert.ok(
        job.log.some((l) => /rank 0 \(stopped: step\) is continued, the ranks continue the others/.test(l)),
        job.log.join('\n'),
      );
      for (const r of [0, 1]) assert.equal(job.states.get(job.k(r))?.state, 'stopped', `rank ${r} stays stopped`);
      console.error(`[dap-coll] Continue All Ranks through the ranks: stops ${c0.body.reason} / ${c1.body.reason}`);
      const s = c0.body.reason === 'breakpoint' ? 0 : 1; // the rank at the breakpoint (rank 0, continued first, mostly)
      const o = 1 - s;
      assert.equal([c0, c1][s].body.reason, 'breakpoint');
      assert.equal((await job.where(s)).line, L, `rank ${s} stopped at the all_reduce line again`);

      // 3. all-stop on, the user steps over the all_reduce in that rank only: the ranks let the other go into it
      //    and pause it again when the step stops; the step completes, nothing sent from here to the other
      await job.clearBreakpoints();
      const before = [job.stopCount(0), job.stopCount(1)];
      const sentO = job.continues.get(o) ?? 0;
      job.allStop.stepping(job.k(s)); // what the tracker does when VS Code sends the user's `next`
      const t0 = Date.now();
      await job.dc(job.k(s)).send('next', { threadId: job.states.get(job.k(s))!.threadId });
      const [us, uo] = await Promise.all([job.stop(s, before[s], 60000), job.stop(o, before[o], 60000)]);
      console.error(`[dap-coll] rank ${s}'s step over all_reduce completed after ${Date.now() - t0} ms; rank ${o}: ${uo.body.reason}`);
      assert.equal(us.body.reason, 'step');
      assert.deepEqual(
        await job.where(s, 't[0].item()'),
        { line: L + 1, file: LOOP, value: '2.0' },
        `rank ${s} stepped over the all_reduce`,
      );
      assert.equal(uo.body.reason, 'pause', `rank ${o} paused again by the step's stop`);
      assert.equal(job.continues.get(o) ?? 0, sentO, `nothing sent to rank ${o}`);
      const debug = new Map((await job.ps()).ranks.map((r) => [r.rank, [r.debug?.state, r.debug?.by]]));
      assert.deepEqual(
        [debug.get(s), debug.get(o)],
        [
          ['stopped', null],
          ['paused', s],
        ],
      );

      // 4. Run All Ranks to Next Collective: both stop at the next all_reduce (iteration 2) before it runs
      const at = [job.stopCount(0), job.stopCount(1)];
      const armed = await job.stepping.runToNextCollective(job.sessionId);
      assert.deepEqual([armed.armed, armed.failed], [[0, 1], []]);
      await Promise.all([job.stop(0, at[0]), job.stop(1, at[1])]);
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
  },
);

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
