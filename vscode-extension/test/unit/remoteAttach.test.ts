import * as assert from 'assert';
import { test } from 'node:test';
import { AttachInfo } from '../../src/attach/rank/attachCli';
import { AttachDeclinedError, CONNECT, hostPrompt } from '../../src/attach/rank/remoteAttach';
import { GroupDeps, RankGroup } from '../../src/attach/group/rankGroup';
import { RankEntry, Session } from '../../src/registry/registryModel';

const info = (o: Partial<AttachInfo>): AttachInfo => ({
  session_id: 's1',
  rank: 2,
  host: '10.0.0.7',
  port: 5680,
  verified: true,
  local: false,
  configuration: { request: 'attach', connect: { host: o.host ?? '10.0.0.7', port: o.port ?? 5680 } },
  ...o,
});
const TRUST = 'A debug server can make VS Code run commands (DAP runInTerminal): connect only to a host you trust.';
const UNVERIFIED =
  "Anyone who can write the cluster store or the Ray KV could have written this entry; set the job's RTDEBUG_JOB_SECRET here to verify it. ";

test('a verified rank on this machine connects without a question', () => {
  assert.equal(hostPrompt(info({ host: '127.0.0.1', local: true })), undefined);
  assert.equal(hostPrompt(info({ host: 'node7', local: true })), undefined, 'the harness says the host is this machine');
});

test('a rank on another machine: its host:port in a modal to confirm', () => {
  const p = hostPrompt(info({}))!;
  assert.equal(p.message, 'rtdebug: rank 2 of session s1 is on another machine, 10.0.0.7:5680. Connect the debugger to it?');
  assert.equal(p.detail, TRUST);
  assert.equal(p.confirm, CONNECT);
  assert.equal(p.confirm, 'Connect');
  assert.equal(p.declined, 'not connecting to rank 2 of session s1 at 10.0.0.7:5680: not confirmed');
  assert.equal(
    hostPrompt(info({ host: 'fe80::1', port: 5678 }))!.message,
    'rtdebug: rank 2 of session s1 is on another machine, [fe80::1]:5678. Connect the debugger to it?',
  );
});

test('an unverified entry says so, wherever it points, this machine included', () => {
  const p = hostPrompt(info({ host: '203.0.113.66', port: 4444, verified: false }))!;
  assert.equal(
    p.message,
    'rtdebug: rank 2 of session s1 is unverified (no job secret here matches its entry); it points at 203.0.113.66:4444, another machine. Connect the debugger to it anyway?',
  );
  assert.equal(p.detail, UNVERIFIED + TRUST);
  assert.equal(p.declined, 'not connecting to rank 2 of session s1 at 203.0.113.66:4444 (unverified): not confirmed');
  assert.equal(
    hostPrompt(info({ host: '127.0.0.1', port: 4444, verified: false, local: true }))!.message,
    'rtdebug: rank 2 of session s1 is unverified (no job secret here matches its entry); it points at 127.0.0.1:4444, on this machine. Connect the debugger to it anyway?',
  );
});

test("the endpoint shown is the one connected to: the configuration's connect wins over the host field", () => {
  const p = hostPrompt({ ...info({}), configuration: { connect: { host: '198.51.100.9', port: 7000 } } })!;
  assert.match(p.message, /another machine, 198\.51\.100\.9:7000\./);
});

test('an older harness (no local/verified): only loopback is this machine', () => {
  const old = (host: string) => hostPrompt({ session_id: 's1', rank: 0, host, port: 5678, configuration: {} });
  assert.equal(old('127.0.0.1'), undefined);
  assert.equal(old('127.1.2.3'), undefined);
  assert.equal(old('localhost'), undefined);
  assert.equal(old('::1'), undefined);
  assert.equal(old('10.0.0.7')!.message, 'rtdebug: rank 0 of session s1 is on another machine, 10.0.0.7:5678. Connect the debugger to it?');
});

test("decisions are keyed by session, host and verification (one answer covers a host's ranks)", () => {
  const k = (o: Partial<AttachInfo>) => hostPrompt(info(o))!.key;
  assert.equal(k({ rank: 0, port: 5678 }), k({ rank: 3, port: 5681 }));
  assert.notEqual(k({}), k({ host: '10.0.0.8' }));
  assert.notEqual(k({}), k({ session_id: 's2' }));
  assert.notEqual(k({}), k({ verified: false }));
});

test('an "all ranks" session does not retry a rank whose host the user declined', async () => {
  const r = (n: number): RankEntry => ({
    schema_version: 1,
    kind: 'rank',
    session_id: 's1',
    rank: n,
    local_rank: 0,
    node_rank: n,
    world_size: 2,
    host: `10.0.0.${n + 1}`,
    port: 5678,
    pid: 10 + n,
    create_time: 1,
    state: 'ready',
    lazy: false,
    wait: false,
    attach_count: 0,
    script: 't.py',
    cwd: '/',
    started_at: 1,
    updated_at: 1,
  });
  const s: Session = {
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
      nnodes: '2',
      nproc_per_node: 1,
      host: '10.0.0.1',
      port_base: 5678,
      ports: [5678],
      started_at: 1,
      updated_at: 1,
      state: 'running',
    },
    ranks: [r(0), r(1)],
  };
  const calls: number[] = [];
  const lines: string[] = [];
  const d: GroupDeps = {
    readSession: () => s,
    attach: async (_sid, rank) => {
      calls.push(rank.rank);
      if (rank.rank === 1) throw new AttachDeclinedError('not connecting to rank 1 of session s1 at 10.0.0.2:5678: not confirmed');
    },
    detachAll: async () => {},
    log: (l) => lines.push(l),
  };
  const g = new RankGroup(d, { readyTimeoutMs: 1000, pollMs: 10 });
  await g.start();
  await new Promise((res) => setTimeout(res, 100));
  await g.stop();
  assert.deepEqual(calls, [0, 1]);
  assert.ok(lines.includes('rtdebug: attach to rank 1 failed: not connecting to rank 1 of session s1 at 10.0.0.2:5678: not confirmed'));
});
