import * as assert from 'assert';
import * as fs from 'fs';
import { DebugClient } from '@vscode/debugadapter-testsupport';
import { DebugProtocol } from '@vscode/debugprotocol';
import { toRankDebugConfig } from '../../src/attach/rank/attachConfig';
import { AllStop } from '../../src/attach/allstop/allStop';
import { jobEntries } from '../../src/attach/allstop/continuePlan';
import { JobAllStop } from '../../src/attach/allstop/jobAllStop';
import { CollectiveStepping } from '../../src/collectives/collectiveStepping';
import { attachInfo } from '../../src/attach/rank/attachCli';
import { runHarness } from '../../src/common/harnessCli';
import { JobProcess } from '../../src/attach/launch/jobProcess';
import { RankDebugStates, RankKey } from '../../src/attach/allstop/rankDebugState';
import { RankGroup } from '../../src/attach/group/rankGroup';
import { parsePsJson } from '../../src/registry/rankSource';
import { Session } from '../../src/registry/registryModel';
import { findSession, readRegistry } from '../../src/registry/registryReader';
import { REPO_ROOT, tmpDir } from '../unit/helpers';
import { attachWithBreakpoint, freePortBase, substitute, topFrame, withTimeout } from './dapHelpers';

/** Line (1-based) of the first line of `file` containing `text`. */
export function lineOf(file: string, text: string): number {
  const i = fs
    .readFileSync(file, 'utf8')
    .split('\n')
    .findIndex((l) => l.includes(text));
  if (i < 0) throw new Error(`no line with ${JSON.stringify(text)} in ${file}`);
  return i + 1;
}

/**
 * A real `rtdebug torchrun` job whose ranks are each attached by a real DAP client (as the extension
 * attaches them), with the extension's rank states, Pause/Continue All and collective stepping wired to those
 * clients exactly as allStopController/collectiveCommands wire them to VS Code sessions (DAP stopped events
 * in, DAP requests out). All-stop is the ranks' own: the job starts as F5 starts it with the `rtdebug.allStop`
 * setting off (`--no-all-stop`), so every rank reaches its breakpoint by itself; `setAllStop` is what a change of
 * the setting does (jobAllStop.ts: one `evaluate` in a rank).
 */
export class RankJob {
  readonly states = new RankDebugStates();
  readonly clients = new Map<number, DebugClient>();
  /** The `continue` requests each rank got from here (DAP), counted. */
  readonly continues = new Map<number, number>();
  readonly log: string[] = [];
  allStopOn = false;
  readonly allStop: AllStop;
  readonly jobAllStop: JobAllStop;
  readonly stepping: CollectiveStepping;
  private stops = new Map<number, DebugProtocol.StoppedEvent[]>();
  private waiters: (() => void)[] = [];
  private group: RankGroup;
  readonly env: NodeJS.ProcessEnv;
  sessionId = '';

  constructor(
    private python: string,
    script: string,
    args: string[],
    private bp: { file: string; line: number },
  ) {
    const registry = tmpDir('rtdebug-dap-coll-');
    this.env = { ...process.env, RTDEBUG_REGISTRY_DIR: registry, PYTHONUNBUFFERED: '1' };
    const portBase = freePortBase();
    const attached = (s: string): RankKey[] => [...this.clients.keys()].sort().map((rank) => ({ session: s, rank }));
    this.allStop = new AllStop(this.states, {
      pause: async (k) => {
        await this.dc(k).send('pause', { threadId: await this.mainThread(k) });
      },
      resume: async (k, threadId) => {
        this.continues.set(k.rank, (this.continues.get(k.rank) ?? 0) + 1);
        await this.dc(k).send('continue', { threadId: threadId ?? (await this.mainThread(k)) });
      },
      attached,
      // as init.ts reads them for Continue All Ranks: the registry's files, fresh
      job: (s) => {
        const found = findSession(readRegistry(registry).sessions, s);
        return found && s ? jobEntries(found.ranks) : undefined;
      },
      log: (l) => this.log.push(l),
    });
    this.jobAllStop = new JobAllStop(
      {
        request: async (k, command, a) => (await this.dc(k).send(command, a)).body,
        attached: (s) => (s === undefined || s === this.sessionId ? attached(this.sessionId) : []),
        jobSays: () => undefined,
        log: (l) => this.log.push(l),
      },
      () => this.allStopOn,
    );
    this.stepping = new CollectiveStepping(this.states, this.allStop, {
      attached,
      request: async (k, command, a) => (await this.dc(k).send(command, a)).body,
      log: (l) => this.log.push(l),
    });
    this.group = new RankGroup(
      {
        readSession: (id) => findSession(readRegistry(registry).sessions, id),
        startJob: () =>
          new JobProcess(
            {
              python,
              module: 'rtdebug',
              mode: 'torchrun',
              script,
              args,
              cwd: REPO_ROOT,
              env: this.env,
              portBase,
              host: '127.0.0.1',
              wait: 'all',
              nprocPerNode: 2,
              torchrunArgs: ['--standalone'],
              allStop: false,
            } /* its own free rendezvous port: other jobs on this machine use 29500 */,
            (l) => this.log.push(l),
          ),
        attach: async (sid, r) => {
          this.sessionId = sid;
          const info = await attachInfo({ python, module: 'rtdebug', env: this.env }, r.rank, sid);
          const config = substitute(toRankDebugConfig(info, true), REPO_ROOT);
          const dc = new DebugClient('unused', 'unused', 'debugpy');
          this.clients.set(r.rank, dc);
          this.stops.set(r.rank, []);
          dc.on('continued', () => this.allStop.continued({ session: sid, rank: r.rank })); // as the tracker does
          this.continues.set(r.rank, 0);
          dc.on('stopped', (ev: DebugProtocol.StoppedEvent) => {
            this.allStop.stopped({ session: sid, rank: r.rank }, ev.body.reason, ev.body.threadId);
            this.stops.get(r.rank)!.push(ev);
            this.waiters.splice(0).forEach((w) => w());
          });
          const bps = await attachWithBreakpoint(dc, config.connect.port, config, this.bp.file, this.bp.line);
          assert.equal(bps.body.breakpoints[0].verified, true, `rank ${r.rank}: breakpoint not verified`);
        },
        detachAll: async () => {},
        log: (l) => this.log.push(l),
      },
      { readyTimeoutMs: 180000, pollMs: 200 },
    );
  }

  async start(): Promise<void> {
    await this.group.start();
  }

  /** The `rtdebug.allStop` setting changed: the job's ranks are told (through one rank, as the extension does). */
  async setAllStop(on: boolean): Promise<void> {
    this.allStopOn = on;
    await this.jobAllStop.changed();
    assert.ok(
      this.log.some((l) => l.startsWith(`rtdebug: all-stop ${on ? 'on' : 'off'} in job`)),
      this.log.slice(-5).join('\n'),
    );
  }

  k(rank: number): RankKey {
    return { session: this.sessionId, rank };
  }
  dc(k: RankKey): DebugClient {
    return this.clients.get(k.rank)!;
  }

  private async mainThread(k: RankKey): Promise<number> {
    const r = await this.dc(k).threadsRequest();
    return (r.body.threads.find((t) => t.name === 'MainThread') ?? r.body.threads[0]).id;
  }

  /** The next stop of `rank` after the `seen`-th (each rank's stops are counted from 0). */
  async stop(rank: number, seen: number, ms = 120000): Promise<DebugProtocol.StoppedEvent> {
    const deadline = Date.now() + ms;
    while ((this.stops.get(rank)?.length ?? 0) <= seen) {
      if (Date.now() > deadline)
        throw new Error(`rank ${rank} did not stop (stop #${seen + 1}) within ${ms} ms\n${this.log.slice(-60).join('\n')}`);
      await withTimeout(new Promise<void>((r) => this.waiters.push(r)), 1000, undefined);
    }
    return this.stops.get(rank)![seen];
  }

  stopCount(rank: number): number {
    return this.stops.get(rank)?.length ?? 0;
  }

  /** The top frame where `rank` is stopped now, and an expression evaluated there. */
  async where(rank: number, expression?: string): Promise<{ line: number; file: string; value?: string }> {
    const threadId = this.states.get(this.k(rank))!.threadId!;
    const f = await topFrame(this.clients.get(rank)!, threadId);
    const value = expression
      ? (await this.clients.get(rank)!.evaluateRequest({ expression, frameId: f.id, context: 'repl' })).body.result
      : undefined;
    return { line: f.line, file: f.source?.path ?? '', value };
  }

  async clearBreakpoints(): Promise<void> {
    for (const dc of this.clients.values()) await dc.setBreakpointsRequest({ source: { path: this.bp.file }, breakpoints: [] });
  }

  async setBreakpoint(): Promise<void> {
    for (const dc of this.clients.values())
      await dc.setBreakpointsRequest({ source: { path: this.bp.file }, breakpoints: [{ line: this.bp.line }] });
  }

  /** What the Ranks view would list for this session: `rtdebug ps --json` through the extension's parser. */
  async ps(): Promise<Session> {
    const s = parsePsJson(await runHarness({ python: this.python, module: 'rtdebug', env: this.env }, ['ps', '--json'], 60000)).find(
      (x) => x.entry.session_id === this.sessionId,
    );
    assert.ok(s, `ps --json lists session ${this.sessionId}`);
    return s!;
  }

  get ended(): Promise<string> {
    return this.group.ended;
  }

  async close(): Promise<void> {
    for (const dc of this.clients.values())
      await withTimeout(
        dc.stop().catch(() => {}),
        2000,
        undefined,
      );
    await this.group.stop();
  }
}
