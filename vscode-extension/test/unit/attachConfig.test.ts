import * as assert from 'assert';
import * as fs from 'fs';
import * as path from 'path';
import { test } from 'node:test';
import { rankEndpoint, toRankDebugConfig } from '../../src/attach/rank/attachConfig';
import { AttachInfo } from '../../src/attach/rank/attachCli';
import { readRegistry } from '../../src/registry/registryReader';
import { rankPickItems, statusText } from '../../src/attach/rank/quickPickItems';
import { FIXTURES, fixtureRegistry } from './helpers';

const info: AttachInfo = {
  session_id: 's1',
  rank: 1,
  host: '127.0.0.1',
  port: 5679,
  configuration: {
    name: 'rtdebug: attach rank 1',
    type: 'debugpy',
    request: 'attach',
    connect: { host: '127.0.0.1', port: 5679 },
    pathMappings: [{ localRoot: '${workspaceFolder}', remoteRoot: '/work/proj' }],
    justMyCode: true,
  },
};

test('with the Python Debugger: a stock debugpy attach, harness fields kept', () => {
  const c = toRankDebugConfig(info, true);
  assert.equal(c.type, 'debugpy');
  assert.equal(c.request, 'attach');
  assert.deepEqual(c.connect, { host: '127.0.0.1', port: 5679 });
  assert.deepEqual(c.pathMappings, info.configuration.pathMappings);
  assert.equal(c.justMyCode, true);
  assert.deepEqual(c.rtdebugRank, { session: 's1', rank: 1 });
  assert.equal(c.name, 'rtdebug: rank 1 (s1)');
});

test('without it: our type, served by DebugAdapterServer(port, host)', () => {
  const c = toRankDebugConfig(info, false);
  assert.equal(c.type, 'rtdebug');
  assert.deepEqual(rankEndpoint(c), { host: '127.0.0.1', port: 5679 });
});

test('connect falls back to the host/port fields when the configuration lacks it', () => {
  const c = toRankDebugConfig({ ...info, configuration: { request: 'attach' } }, false);
  assert.deepEqual(c.connect, { host: '127.0.0.1', port: 5679 });
  assert.equal(rankEndpoint({ request: 'attach' }), undefined);
  assert.deepEqual(rankEndpoint({ connect: { port: 1 } }), { host: '127.0.0.1', port: 1 });
});

test('quick pick rows: one per live rank, with host:port and state', () => {
  const { sessions } = readRegistry(fixtureRegistry(), (pid) => pid !== 2001);
  const items = rankPickItems(sessions);
  assert.equal(items.length, 2);
  assert.match(items[0].label, /rank 0/);
  assert.match(items[0].description, /127\.0\.0\.1:5678 · ready · waiting for client/);
  assert.match(items[1].description, /5679 · starting \(lazy\)/);
  assert.match(items[0].detail, /session s1 · torchrun ddp_fashion\.py · node 0 local 0 · pid 1002/);
  assert.deepEqual(
    items.map((i) => [i.session, i.rank, i.attachable]),
    [
      ['s1', 0, true],
      ['s1', 1, false],
    ],
  );
  assert.ok(fs.existsSync(path.join(FIXTURES, 'registry', 's1', 'rank-1.json')));
});

test('status bar text: attached/live, hidden when nothing is live', () => {
  const { sessions } = readRegistry(fixtureRegistry(), (pid) => pid !== 2001);
  assert.equal(statusText(sessions, 1)?.text, '$(debug) rtdebug 1/2');
  assert.match(statusText(sessions, 0)?.tooltip ?? '', /2 live rank\(s\) in 1 session\(s\) \(s1\), 0 attached/);
  assert.equal(statusText([], 0), undefined);
});
