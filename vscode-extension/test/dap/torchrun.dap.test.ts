import * as assert from 'assert';
import * as path from 'path';
import { test } from 'node:test';
import { DebugClient } from '@vscode/debugadapter-testsupport';
import { DebugProtocol } from '@vscode/debugprotocol';
import { toRankDebugConfig } from '../../src/attach/rank/attachConfig';
import { attachInfo } from '../../src/attach/rank/attachCli';
import { JobProcess } from '../../src/attach/launch/jobProcess';
import { RankGroup } from '../../src/attach/group/rankGroup';
import { findSession, readRegistry } from '../../src/registry/registryReader';
import { harnessPython, REPO_ROOT, tmpDir } from '../unit/helpers';
import { attachWithBreakpoint, freePortBase, markerLine, substitute, topFrame, withTimeout } from './dapHelpers';

/**
 * DAP end-to-end: a real 2-rank `python -m rtdebug torchrun` job, driven by the extension's own RankGroup
 * and JobProcess, each rank attached by a real DAP client (DebugClient, what VS Code's adapters are tested
 * with) using exactly the configuration the extension would start (`attach --json` → toRankDebugConfig).
 */
const python = harnessPython();

interface Case {
  script: string;
  tag: string;
  worldRankExpr: string;
  args: string[];
  mode: 'run' | 'torchrun';
  ranks: number[];
}
const CASES: Case[] = [
  {
    script: 'ddp_fashion.py',
    mode: 'torchrun',
    ranks: [0, 1],
    tag: 'ddp step',
    worldRankExpr: 'ray.train.get_context().get_world_rank()',
    args: ['--epochs', '1', '--samples', '128'],
  },
  {
    script: 'plain_ddp.py',
    mode: 'torchrun',
    ranks: [0, 1],
    tag: 'plain step',
    worldRankExpr: 'dist.get_rank()',
    args: ['--epochs', '1', '--samples', '64'],
  },
  {
    script: 'local_linear.py',
    mode: 'run',
    ranks: [0],
    tag: 'local step',
    worldRankExpr: 'ray.train.get_context().get_world_rank()',
    args: ['--epochs', '2'],
  },
];

for (const c of CASES) {
  test(
    `${c.mode === 'run' ? 'single-process run' : '2-rank torchrun'} ${c.script}: each rank stops at the breakpoint and evaluates its own rank`,
    { skip: !python && 'no harness interpreter', timeout: 300000 },
    async () => {
      const file = path.join(REPO_ROOT, 'examples', c.script);
      const line = markerLine(file, c.tag);
      const registry = tmpDir('rtdebug-dap-reg-');
      const env = { ...process.env, RTDEBUG_REGISTRY_DIR: registry, PYTHONUNBUFFERED: '1' };
      const log: string[] = [];
      const clients = new Map<number, DebugClient>();
      const stopped = new Map<number, Promise<DebugProtocol.StoppedEvent>>();
      const portBase = freePortBase();
      const t0 = Date.now();
      const step = (m: string) => console.error(`[dap-e2e ${c.script} +${((Date.now() - t0) / 1000).toFixed(1)}s] ${m}`);
      const group = new RankGroup(
        {
          readSession: (id) => findSession(readRegistry(registry).sessions, id),
          startJob: () =>
            new JobProcess(
              {
                python: python!,
                module: 'rtdebug',
                mode: c.mode,
                script: file,
                args: c.args,
                cwd: REPO_ROOT,
                env,
                portBase,
                host: '127.0.0.1',
                wait: 'all',
                nprocPerNode: 2,
              },
              (l) => {
                log.push(l);
                if (process.env.RTDEBUG_TEST_VERBOSE) step(l);
              },
            ),
          attach: async (sid, r) => {
            step(`attaching rank ${r.rank}`);
            const info = await attachInfo({ python: python!, module: 'rtdebug', env }, r.rank, sid);
            const config = substitute(toRankDebugConfig(info, true), REPO_ROOT);
            assert.equal(config.type, 'debugpy');
            assert.deepEqual(config.connect, { host: '127.0.0.1', port: portBase + r.rank });
            const dc = new DebugClient('unused', 'unused', 'debugpy');
            clients.set(r.rank, dc);
            stopped.set(r.rank, dc.waitForEvent('stopped', 240000) as Promise<DebugProtocol.StoppedEvent>);
            const bps = await attachWithBreakpoint(dc, config.connect.port, config, file, line);
            assert.equal(bps.body.breakpoints[0].verified, true, `rank ${r.rank}: breakpoint not verified`);
            step(`rank ${r.rank} attached, breakpoint at line ${line} verified`);
          },
          detachAll: async () => {},
          log: (l) => log.push(l),
        },
        { readyTimeoutMs: 180000, pollMs: 200 },
      );
      try {
        await group.start();
        assert.deepEqual([...clients.keys()].sort(), c.ranks);
        for (const rank of c.ranks) {
          const dc = clients.get(rank)!;
          const ev = await stopped.get(rank)!;
          step(`rank ${rank} stopped: ${ev.body.reason}`);
          assert.equal(ev.body.reason, 'breakpoint');
          const frame = await topFrame(dc, ev.body.threadId!);
          assert.equal(frame.line, line);
          assert.equal(path.basename(frame.source?.path ?? ''), c.script);
          const r = await dc.evaluateRequest({ expression: c.worldRankExpr, frameId: frame.id, context: 'repl' });
          assert.equal(r.body.result, String(rank), `rank ${rank} evaluates ${c.worldRankExpr}`);
        }
        for (const [rank, dc] of clients) {
          await dc.setBreakpointsRequest({ source: { path: file }, breakpoints: [] });
          const ev = await stopped.get(rank)!;
          await dc.continueRequest({ threadId: ev.body.threadId! });
        }
        step('continued every rank');
        void group.ended.then((why) => step(`group ended: ${why}`));
        const code = await withTimeout(group.ended, 180000, 'timeout');
        assert.equal(code, 'job exited with code 0', log.slice(-15).join('\n'));
      } finally {
        step('cleanup');
        // After the job ended the sockets are closed already; DebugClient.stop() would wait on them forever.
        for (const dc of clients.values())
          await withTimeout(
            dc.stop().catch(() => {}),
            2000,
            undefined,
          );
        step('clients stopped');
        await group.stop();
        step('group stopped');
      }
    },
  );
}
