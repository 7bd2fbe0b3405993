import * as assert from 'assert';
import { test } from 'node:test';
import { connectArgs, parseRemoteSessions, sshConfigHosts, sshConfigOverride } from '../../src/connect/connectModel';

test('sshConfigHosts lists named hosts, never patterns or options', () => {
  const cfg = [
    'Host login node0 node1 # the cluster',
    '  HostName 10.0.0.1',
    'Host *',
    'Host !bad gpu-? -oProxyCommand=x',
    'host=other',
    'Host login',
  ].join('\n');
  assert.deepStrictEqual(sshConfigHosts(cfg), ['login', 'node0', 'node1', 'other']);
  assert.deepStrictEqual(sshConfigHosts(''), []);
});

test('parseRemoteSessions keeps live well-formed sessions only', () => {
  const out = JSON.stringify({
    schema_version: 1,
    sessions: [
      { session_id: 's1', state: 'running', script: 'train.py', ranks: [{}, {}], verified: true },
      { session_id: '../x', state: 'running' },
      { session_id: 's2', state: 'exited' },
      { session_id: 's3', state: 'starting', verified: false },
      'junk',
    ],
  });
  assert.deepStrictEqual(parseRemoteSessions(out), [
    { sessionId: 's1', script: 'train.py', ranks: 2, verified: true },
    { sessionId: 's3', script: '', ranks: 0, verified: false },
  ]);
  assert.deepStrictEqual(parseRemoteSessions('not json'), []);
  assert.deepStrictEqual(parseRemoteSessions('{"sessions": 3}'), []);
});

test('connectArgs names the host, the session and the remote rtdebug', () => {
  assert.deepStrictEqual(connectArgs('node0', 's1', 'rtdebug'), ['connect', 'node0', '--session', 's1', '--remote-rtdebug', 'rtdebug']);
});

test('sshConfigOverride names $HOME/.ssh/config only where ssh would read another home', () => {
  const exists = (f: string) => f === '/srv/cs-home/.ssh/config';
  // code-server (or a container) started with HOME elsewhere: ssh ignores $HOME, so the file must be named
  assert.strictEqual(sshConfigOverride('/srv/cs-home', '/root', exists), '/srv/cs-home/.ssh/config');
  assert.strictEqual(sshConfigOverride('/srv/cs-home/', '/root', exists), '/srv/cs-home/.ssh/config');
  // the usual case: the same home, ssh reads that file itself and keeps its system-wide config (-F drops it)
  assert.strictEqual(
    sshConfigOverride('/root', '/root', () => true),
    undefined,
  );
  assert.strictEqual(
    sshConfigOverride('/root/', '/root', () => true),
    undefined,
  );
  // no such file, or no passwd home to compare with: ssh's own defaults
  assert.strictEqual(sshConfigOverride('/srv/other', '/root', exists), undefined);
  assert.strictEqual(sshConfigOverride('/srv/cs-home', undefined, exists), undefined);
});

test('connectArgs passes the ssh config when one is named', () => {
  assert.deepStrictEqual(connectArgs('node0', 's1', 'rtdebug', '/h/.ssh/config'), [
    'connect',
    'node0',
    '--session',
    's1',
    '--remote-rtdebug',
    'rtdebug',
    '--ssh-config',
    '/h/.ssh/config',
  ]);
});
