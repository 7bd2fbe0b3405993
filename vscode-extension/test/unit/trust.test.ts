import * as assert from 'assert';
import { execFileSync } from 'child_process';
import * as fs from 'fs';
import * as path from 'path';
import { test } from 'node:test';
import { absoluteFrom, neutralCwd } from '../../src/common/cliPaths';
import { checkInstalled, cliExecOptions, runHarness } from '../../src/common/harnessCli';
import { cliPoll } from '../../src/registry/rankSource';
import { checkTrusted, trustGate, UntrustedWorkspaceError } from '../../src/common/trustGate';
import { tmpDir } from './helpers';

/** A workspace as a cloned malicious repo would ship it: its own `<name>/__main__.py` that leaves a mark. */
function evilWorkspace(name: string): { ws: string; mark: string } {
  const ws = tmpDir('rtdebug-evil-ws-');
  const mark = path.join(ws, 'RAN');
  fs.mkdirSync(path.join(ws, name));
  const code = `open(${JSON.stringify(mark)}, "w").write("workspace code ran")\n`;
  fs.writeFileSync(path.join(ws, name, '__init__.py'), code);
  fs.writeFileSync(path.join(ws, name, '__main__.py'), code);
  return { ws, mark };
}

/** Runs `f` with the process cwd in `dir` (an extension host's cwd may well be the workspace). */
async function inDir<T>(dir: string, f: () => Promise<T>): Promise<T> {
  const before = process.cwd();
  process.chdir(dir);
  try {
    return await f();
  } finally {
    process.chdir(before);
  }
}

function python3(): string | undefined {
  try {
    execFileSync('python3', ['-c', '0'], { stdio: 'ignore' });
    return 'python3';
  } catch {
    return undefined;
  }
}

test('trust gate: an untrusted workspace runs nothing and says so in one message', () => {
  assert.equal(trustGate(true, 'Stop Session'), undefined);
  assert.equal(
    trustGate(false, 'Stop Session'),
    "Stop Session runs Python (the rtdebug CLI), which rtdebug does only in a trusted workspace. Trust this folder (Workspaces: Manage Workspace Trust) to use it; the Ranks view still lists this machine's sessions.",
  );
  assert.doesNotThrow(() => checkTrusted(true, 'Attaching to a rank'));
  assert.throws(
    () => checkTrusted(false, 'Attaching to a rank'),
    (e: Error) =>
      e instanceof UntrustedWorkspaceError &&
      e.message.startsWith('Attaching to a rank runs Python (the rtdebug CLI), which rtdebug does only in a trusted workspace.'),
  );
});

test('CLI listing: never polled in an untrusted workspace; Refresh (force) polls only in a trusted one', () => {
  const cluster = { RAY_ADDRESS: '10.0.0.1:6379' };
  assert.equal(cliPoll('auto', cluster, true, false), 'poll');
  assert.equal(cliPoll('auto', cluster, false, false), 'untrusted');
  assert.equal(cliPoll('cli', {}, false, true), 'untrusted');
  assert.equal(cliPoll('auto', {}, false, true), 'skip', 'nothing wanted from the CLI: Refresh in an untrusted workspace stays quiet');
  assert.equal(cliPoll('files', cluster, false, false), 'skip');
  assert.equal(cliPoll('auto', {}, true, false), 'skip');
  assert.equal(cliPoll('auto', {}, true, true), 'poll');
});

test('neutral cwd: one private, empty directory of ours, never the process cwd', () => {
  const d = neutralCwd();
  assert.equal(neutralCwd(), d);
  assert.ok(path.isAbsolute(d));
  const st = fs.statSync(d);
  assert.ok(st.isDirectory());
  assert.equal(st.mode & 0o777, 0o700);
  assert.equal(st.uid, process.getuid?.());
  assert.deepEqual(fs.readdirSync(d), []);
  assert.notEqual(d, process.cwd());
  assert.deepEqual(cliExecOptions({ python: 'py', module: 'rtdebug' }, 5000).cwd, d);
});

test('runHarness and the installed-check run in the neutral cwd, not in the workspace the host runs in', async () => {
  const { ws } = evilWorkspace('rtdebug');
  const fake = path.join(tmpDir(), 'fakepy');
  // a stand-in interpreter that reports where it was started and with what
  fs.writeFileSync(fake, '#!/bin/sh\npwd -P\necho "$@"\n', { mode: 0o755 });
  const out = await inDir(ws, () => runHarness({ python: fake, module: 'rtdebug' }, ['ps', '--json']));
  assert.deepEqual(out.trim().split('\n'), [fs.realpathSync(neutralCwd()), '-m rtdebug ps --json']);
  const rec = path.join(path.dirname(fake), 'check-cwd');
  fs.writeFileSync(fake, `#!/bin/sh\npwd -P > ${rec}\n`, { mode: 0o755 });
  await inDir(ws, () => checkInstalled({ python: fake, module: 'rtdebug' }));
  assert.equal(fs.readFileSync(rec, 'utf8').trim(), fs.realpathSync(neutralCwd()));
});

const py = python3();
test("a cloned repo's own package is never what the CLI runs", { skip: !py && 'no python3' }, async () => {
  const { ws, mark } = evilWorkspace('rtdebug_ws_probe');
  const cmd = { python: py!, module: 'rtdebug_ws_probe' };
  await assert.rejects(
    inDir(ws, () => runHarness(cmd, ['ps', '--json'])),
    /The rtdebug harness is not installed in python3 \(no module "rtdebug_ws_probe"\)/,
  );
  await assert.rejects(
    inDir(ws, () => checkInstalled(cmd)),
    /The rtdebug harness is not installed in python3 \(no module "rtdebug_ws_probe"\)/,
  );
  assert.ok(!fs.existsSync(mark), 'the workspace module must not have run');
  // the control: the same module, started from the workspace as cwd, would have run
  execFileSync(py!, ['-m', 'rtdebug_ws_probe'], { cwd: ws });
  assert.ok(fs.existsSync(mark));
});

test('paths relative to the workspace are made absolute against it (the CLI no longer runs there)', () => {
  assert.equal(absoluteFrom('/home/u/proj', '.venv/bin/python'), '/home/u/proj/.venv/bin/python');
  assert.equal(absoluteFrom('/home/u/proj', './py'), '/home/u/proj/py');
  assert.equal(absoluteFrom('/home/u/proj', '/usr/bin/python3'), '/usr/bin/python3');
  assert.equal(absoluteFrom('/home/u/proj', 'python3'), 'python3', 'a bare name is looked up on PATH');
  assert.equal(absoluteFrom(undefined, '.venv/bin/python'), '.venv/bin/python');
});
