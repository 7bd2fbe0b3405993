import * as assert from 'assert';
import { test } from 'node:test';
import { GroupAdapter, DapMessage } from '../../src/attach/group/groupAdapter';
import { GroupDeps, GroupJob, RankGroup } from '../../src/attach/group/rankGroup';
import { RankEntry, RankState, Session } from '../../src/registry/registryModel';

function rank(r: number, state: RankState, pid = 100 + r): RankEntry {
  return {
    schema_version: 1,
    kind: 'rank',
    session_id: 's1',
    rank: r,
    local_rank: r,
    node_rank: 0,
    world_size: 2,
    host: '127.0.0.1',
    port: 5678 + r,
    pid,
    create_time: 1,
    state,
    lazy: false,
    wait: true,
    attach_count: 0,
    script: 't.py',
    cwd: '/',
    started_at: 1,
    updated_at: 1,
  };
}

function session(ranks: RankEntry[]): Session {
  return {
    entry: {
      schema_version: 1,
      kind: 'session',
      session_id: 's1',
      mode: 'torchrun',
      launcher_pid: 1,
      launcher_create_time: 1,
      command: [],
      cwd: '/',
      script: 't.py',
      nnodes: '1',
      nproc_per_node: 2,
      host: '127.0.0.1',
      port_base: 5678,
      ports: [5678, 5679],
      started_at: 1,
      updated_at: 1,
      state: 'running',
    },
    ranks,
  };
}

function fakeJob(): GroupJob & { exit(code: number): void; stops: number } {
  let exit: (c: number) => void = () => {};
  const job = {
    running: true,
    stops: 0,
    sessionId: Promise.resolve('s1'),
    exited: new Promise<number | null>((r) => {
      exit = r;
    }),
    exit(code: number) {
      job.running = false;
      exit(code);
    },
    async stop() {
      job.stops++;
      job.exit(143);
    },
    lastLines: () => ['last line'],
  };
  return job;
}

function deps(state: { s?: Session }, job?: GroupJob) {
  const attached: number[] = [];
  const detached: boolean[] = [];
  const d: GroupDeps = {
    readSession: () => state.s,
    startJob: job ? () => job : undefined,
    attach: async (_sid, r) => {
      attached.push(r.rank);
    },
    detachAll: async (t) => {
      detached.push(t);
    },
    log: () => {},
  };
  return { d, attached, detached };
}

test('attach mode: waits for every local rank, attaches each, then picks up late ones', async () => {
  const state: { s?: Session } = { s: session([rank(0, 'ready'), rank(1, 'starting')]) };
  const { d, attached } = deps(state);
  const g = new RankGroup(d, { readyTimeoutMs: 5000, pollMs: 10 });
  const started = g.start();
  await new Promise((r) => setTimeout(r, 50));
  assert.deepEqual(attached, []);
  state.s = session([rank(0, 'ready'), rank(1, 'ready')]);
  await started;
  assert.deepEqual(attached, [0, 1]);
  state.s = session([rank(0, 'attached'), rank(1, 'ready', 999)]); // rank 1 restarted: new pid
  await new Promise((r) => setTimeout(r, 80));
  assert.deepEqual(attached, [0, 1, 1]);
  state.s = undefined;
  assert.match(await g.ended, /session s1 ended/);
});

test('only the listed ranks are attached', async () => {
  const { d, attached } = deps({ s: session([rank(0, 'ready'), rank(1, 'ready')]) });
  const g = new RankGroup(d, { ranks: [1], readyTimeoutMs: 1000, pollMs: 10 });
  await g.start();
  assert.deepEqual(attached, [1]);
  await g.stop();
});

test('error paths: no session, ranks never ready', async () => {
  await assert.rejects(new RankGroup(deps({}).d, { readyTimeoutMs: 100 }).start(), /no live rtdebug session/);
  await assert.rejects(new RankGroup(deps({}).d, { session: 'x', readyTimeoutMs: 100 }).start(), /no live rtdebug session "x"/);
  const { d } = deps({ s: session([rank(0, 'ready'), rank(1, 'starting')]) });
  await assert.rejects(new RankGroup(d, { readyTimeoutMs: 100, pollMs: 10 }).start(), /ranks never became ready within 0 s \(ready: 0\)/);
});

test('launch mode: job exit before ready is an error; stop ends the job and detaches', async () => {
  const job = fakeJob();
  const { d } = deps({}, job);
  const g = new RankGroup(d, { readyTimeoutMs: 5000, pollMs: 10 });
  const p = g.start();
  job.exit(1);
  await assert.rejects(p, /job exited before its ranks were ready:\nlast line/);

  const job2 = fakeJob();
  const x = deps({ s: session([rank(0, 'ready'), rank(1, 'ready')]) }, job2);
  const g2 = new RankGroup(x.d, { readyTimeoutMs: 5000, pollMs: 10 });
  await g2.start();
  assert.equal(g2.session, 's1');
  await g2.stop();
  assert.equal(job2.stops, 1);
  assert.deepEqual(x.detached, [true]);
});

test('group adapter: DAP handshake, output and terminated on job end', async () => {
  const job = fakeJob();
  const { d } = deps({ s: session([rank(0, 'ready'), rank(1, 'ready')]) }, job);
  const errors: string[] = [];
  const a = new GroupAdapter(new RankGroup(d, { readyTimeoutMs: 5000, pollMs: 10 }), (m) => errors.push(m));
  const seen: DapMessage[] = [];
  a.onDidSendMessage((m) => seen.push(m));
  a.handleMessage({ seq: 1, type: 'request', command: 'initialize', arguments: {} });
  a.handleMessage({ seq: 2, type: 'request', command: 'launch', arguments: {} });
  a.handleMessage({ seq: 3, type: 'request', command: 'configurationDone' });
  assert.deepEqual(
    seen.slice(0, 4).map((m) => (m.type === 'event' ? `event ${m.event}` : `${m.command} ${m.success}`)),
    ['initialize true', 'event initialized', 'launch true', 'configurationDone true'],
  );
  await new Promise((r) => setTimeout(r, 50)); // ranks attached
  job.exit(0);
  await new Promise((r) => setTimeout(r, 20));
  const tail = seen.slice(4);
  assert.deepEqual(
    tail.map((m) => m.event),
    ['output', 'terminated'],
    JSON.stringify(tail),
  );
  assert.match(String((tail[0].body as { output: string }).output), /job exited with code 0/);
  assert.deepEqual(errors, []);
});

test('group adapter: a failed start shows one error line and terminates', async () => {
  const errors: string[] = [];
  const a = new GroupAdapter(new RankGroup(deps({}).d, { readyTimeoutMs: 100 }), (m) => errors.push(m));
  const seen: DapMessage[] = [];
  a.onDidSendMessage((m) => seen.push(m));
  a.handleMessage({ seq: 1, type: 'request', command: 'attach', arguments: {} });
  await new Promise((r) => setTimeout(r, 20));
  assert.deepEqual(errors, ['rtdebug: no live rtdebug session: start one with `rtdebug torchrun …` first']);
  assert.equal(seen.filter((m) => m.event === 'terminated').length, 1);
  a.handleMessage({ seq: 2, type: 'request', command: 'disconnect', arguments: {} });
  await new Promise((r) => setTimeout(r, 20));
  assert.equal(seen.filter((m) => m.event === 'terminated').length, 1, 'terminated only once');
  assert.ok(seen.some((m) => m.command === 'disconnect' && m.success));
});

test('launch mode: a job that never prints its session line times out (and is stopped by the caller)', async () => {
  const job = { ...fakeJob(), sessionId: new Promise<string>(() => {}) };
  const { d } = deps({}, job);
  const g = new RankGroup(d, { readyTimeoutMs: 50, pollMs: 10 });
  await assert.rejects(g.start(), /printed no "rtdebug: session …" line within 0 s:\nlast line/);
  await g.stop();
});
