import * as assert from 'assert';
import { execFileSync } from 'child_process';
import * as path from 'path';
import { test } from 'node:test';
import { DebugClient } from '@vscode/debugadapter-testsupport';
import { DebugProtocol } from '@vscode/debugprotocol';
import { toRankDebugConfig } from '../../src/attach/rank/attachConfig';
import { attachInfo } from '../../src/attach/rank/attachCli';
import { JobProcess } from '../../src/attach/launch/jobProcess';
import { parseCapsuleInfo, rankProblem, replayConfiguration, replayOptions } from '../../src/attach/launch/replayModel';
import { RankGroup } from '../../src/attach/group/rankGroup';
import { runHarness } from '../../src/common/harnessCli';
import { findSession, readRegistry } from '../../src/registry/registryReader';
import { harnessPython, REPO_ROOT, tmpDir } from '../unit/helpers';
import { attachWithBreakpoint, freePortBase, markerLine, substitute, topFrame, withTimeout } from './dapHelpers';

/**
 * DAP end-to-end of "mode": "replay": a real 2-rank job captured with `rtdebug torchrun --capture`, then rank 1
 * replayed alone through the extension's own path (the harness's `capsule --json` read by replayModel, a
 * JobProcess of mode replay, a RankGroup of that one rank) and attached by a real DAP client: it stops at the
 * same line and evaluates the loss the job printed for rank 1.
 */
const python = harnessPython();
const SCRIPT = path.join(REPO_ROOT, 'tests', 'scripts', 'replay_shell_job.py');

test(
  'replay rank 1 of a captured job: stops at the line and evaluates the loss the job printed',
  { skip: !python && 'no harness interpreter', timeout: 300000 },
  async () => {
    const registry = tmpDir('rtdebug-dap-replay-reg-');
    const capsule = path.join(tmpDir('rtdebug-dap-replay-'), 'cap');
    const env = { ...process.env, RTDEBUG_REGISTRY_DIR: registry, PYTHONUNBUFFERED: '1' };
    const base = freePortBase();
    const job = execFileSync(
      python!,
      ['-m', 'rtdebug', 'torchrun', '--debug-port-base', String(base), '--master-addr', '127.0.0.1', '--master-port', String(base + 4),
     '--nproc-per-node', '2', '--capture', capsule, SCRIPT], // prettier-ignore
      { cwd: REPO_ROOT, env, encoding: 'utf8', timeout: 180000 },
    );
    // step 1's loss depends on step 0's all-reduced gradients: what the capsule serves, not rank 1's own
    const printed = [0, 1].map((step) => new RegExp(`rank 1 step ${step} loss (\\d+\\.\\d{8})`).exec(job)?.[1]);
    assert.ok(printed[0] && printed[1], job);
    const cli = { python: python!, module: 'rtdebug', env };
    const info = parseCapsuleInfo(await runHarness(cli, ['capsule', capsule, '--json']));
    assert.equal(info.worldSize, 2);
    assert.equal(rankProblem(info, 1), undefined);
    assert.equal(rankProblem(info, 2), 'rank 2 is out of range: the job had ranks 0-1.');
    const line = markerLine(SCRIPT, 'replay step');
    const port = base + 10;
    const log: string[] = [];
    let dc: DebugClient | undefined;
    let stopped: Promise<DebugProtocol.StoppedEvent> | undefined;
    const group = new RankGroup(
      {
        readSession: (id) => findSession(readRegistry(registry).sessions, id),
        startJob: () =>
          new JobProcess(
            {
            python: python!, module: 'rtdebug', mode: 'replay', script: '', args: [], cwd: REPO_ROOT, env,
            portBase: port, host: '127.0.0.1', wait: 'all', replay: replayOptions(replayConfiguration(capsule, 1)),
          }, // prettier-ignore
            (l) => log.push(l),
          ),
        attach: async (sid, r) => {
          assert.equal(r.rank, 1);
          const config = substitute(toRankDebugConfig(await attachInfo(cli, r.rank, sid), true), REPO_ROOT);
          assert.deepEqual(config.connect, { host: '127.0.0.1', port }); // the replay's one port, not base + rank
          dc = new DebugClient('unused', 'unused', 'debugpy');
          stopped = dc.waitForEvent('stopped', 240000) as Promise<DebugProtocol.StoppedEvent>;
          const bps = await attachWithBreakpoint(dc, port, config, SCRIPT, line);
          assert.equal(bps.body.breakpoints[0].verified, true);
        },
        detachAll: async () => {},
        log: (l) => log.push(l),
      },
      { ranks: [1], readyTimeoutMs: 180000, pollMs: 200 },
    );
    try {
      await group.start();
      for (const step of [0, 1]) {
        const ev = await stopped!;
        assert.equal(ev.body.reason, 'breakpoint');
        const frame = await topFrame(dc!, ev.body.threadId!);
        assert.equal(frame.line, line);
        const at = async (expression: string) =>
          (await dc!.evaluateRequest({ expression, frameId: frame.id, context: 'repl' })).body.result;
        assert.equal(await at('dist.get_rank()'), '1');
        assert.equal(await at('step'), String(step));
        assert.equal(await at('f"{loss.item():.8f}"'), `'${printed[step]}'`);
        if (step === 0) stopped = dc!.waitForEvent('stopped', 240000) as Promise<DebugProtocol.StoppedEvent>;
        else await dc!.setBreakpointsRequest({ source: { path: SCRIPT }, breakpoints: [] });
        await dc!.continueRequest({ threadId: ev.body.threadId! });
      }
      const code = await withTimeout(group.ended, 180000, 'timeout');
      assert.equal(code, 'job exited with code 0', log.slice(-15).join('\n'));
    } finally {
      if (dc)
        await withTimeout(
          dc.stop().catch(() => {}),
          2000,
          undefined,
        );
      await group.stop();
    }
  },
);
