import * as assert from 'assert';
import * as fs from 'fs';
import * as path from 'path';
import { test } from 'node:test';
import { evaluateInAll } from '../../src/attach/allstop/rankEvaluate';
import { StopOnFocus } from '../../src/attach/allstop/stopFocus';
import { rankViewState } from '../../src/ranks/ranksTree';
import { answersMessage, configureExpression } from '../../src/stopon/stopOnAnswers';
import { harnessPython, EXT_ROOT, tmpDir } from '../unit/helpers';
import { markerLine, withTimeout } from './dapHelpers';
import { RankJob } from './rankJob';

/**
 * "Stop All Ranks When…" (issue 30) against real debugpy ranks of a real 2-rank gloo DDP job: `nonfinite`
 * is set on both RUNNING ranks through DAP (paused together, evaluated in their top frames once both
 * stopped, continued together, as the command does), both answer; then rank 1's loss goes NaN and --stop-on stops both ranks, rank 1 as the
 * origin (its stopped event has preserveFocusHint false and the description the view shows), which is the
 * session the extension focuses; `ps --json` carries each rank's `stop`; turned off, the job runs to its end.
 */
const python = harnessPython();
const skip = !python && 'no harness interpreter';
const JOB = path.join(EXT_ROOT, 'test', 'fixtures', 'jobs', 'stopon_ddp.py');

test('--stop-on set on running ranks through DAP; the origin rank is the one focused', { skip, timeout: 400000 }, async () => {
  const nanFile = path.join(tmpDir('rtdebug-dap-stopon-'), 'nan');
  const job = new RankJob(python!, JOB, ['--nan-file', nanFile], { file: JOB, line: markerLine(JOB, 'stopon backward') });
  try {
    await job.start();
    // into the training loop first (DDP made), then running again: the conditions go to running ranks
    await Promise.all([job.stop(0, 0), job.stop(1, 0)]);
    await job.clearBreakpoints();
    job.allStop.continueAll(job.sessionId);
    for (const r of [0, 1]) assert.equal(job.states.get(job.k(r))?.state, 'continuing');
    const request = async (k: { session: string; rank: number }, command: string, args: Record<string, unknown>) =>
      (await job.dc(k).send(command, args)).body;
    const t0 = Date.now();
    const on = await evaluateInAll(job.states, job.allStop, { request }, [job.k(0), job.k(1)], configureExpression('nonfinite'));
    assert.ok(on.ok, JSON.stringify(on));
    const answers = [0, 1].map((rank) => ({ rank, result: on.results.get(rank)?.value, error: on.results.get(rank)?.error }));
    const msg = answersMessage(answers);
    assert.deepEqual([msg.text, msg.level], ['rtdebug: ranks 0-1 stop on nonfinite', 'info'], job.log.slice(-20).join('\n'));
    console.error(`[dap-stopon] set on 2 running ranks in ${Date.now() - t0} ms (${job.stopCount(0) - 1} pause(s) of rank 0)`);
    for (const r of [0, 1]) assert.equal(job.states.get(job.k(r))?.state, 'running', `rank ${r} was continued`);

    fs.writeFileSync(nanFile, '');
    const seen = [job.stopCount(0), job.stopCount(1)];
    const [e0, e1] = await Promise.all([job.stop(0, seen[0], 120000), job.stop(1, seen[1], 120000)]);
    const body = (e: typeof e0) => e.body as typeof e0.body & { preserveFocusHint?: boolean };
    assert.match(String(body(e1).description), /^rtdebug --stop-on nonfinite: .*\(origin\)/);
    assert.match(String(body(e0).description), /^rtdebug --stop-on nonfinite: /);
    assert.deepEqual([body(e0).preserveFocusHint, body(e1).preserveFocusHint], [true, false]);
    const focus = new StopOnFocus();
    const pick = [e0, e1].map((e, rank) =>
      focus.stopped(job.sessionId, { rank, description: body(e).description, preserveFocusHint: body(e).preserveFocusHint }),
    );
    assert.deepEqual(pick, [undefined, 1], 'the origin, rank 1, is the session focused');

    const ps = await job.ps();
    const stops = ps.ranks.map((r) => [r.rank, r.stop?.kind, r.stop?.origin]);
    assert.deepEqual(stops, [
      [0, 'nonfinite', false],
      [1, 'nonfinite', true],
    ]);
    assert.match(rankViewState(ps.ranks[1], undefined).text, /^stopped \(nonfinite: .*\(origin\)\)/);

    // off again (the ranks are stopped: evaluated where they are), then the job runs to its end
    const offAll = await evaluateInAll(job.states, job.allStop, { request }, [job.k(0), job.k(1)], configureExpression(''));
    assert.ok(offAll.ok, JSON.stringify(offAll));
    const off = [0, 1].map((rank) => ({ rank, result: offAll.results.get(rank)?.value }));
    assert.equal(answersMessage(off).text, 'rtdebug: ranks 0-1: --stop-on is off');
    job.allStop.continueAll(job.sessionId);
    assert.equal(await withTimeout(job.ended, 180000, 'timeout'), 'job exited with code 0', job.log.slice(-15).join('\n'));
  } finally {
    await job.close();
  }
});
