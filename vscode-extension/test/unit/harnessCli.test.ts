import * as assert from 'assert';
import * as fs from 'fs';
import * as path from 'path';
import { test } from 'node:test';
import * as jsonc from 'jsonc-parser';
import { attachArgs } from '../../src/attach/rank/attachCli';
import { describeFailure, runHarness } from '../../src/common/harnessCli';
import { generateArgs, generateConfigs } from '../../src/configs/generateCli';
import { applyGenerated } from '../../src/configs/launchFiles';
import { JobProcess, jobArgs, JobSpec } from '../../src/attach/launch/jobProcess';
import { harnessPython, tmpDir } from './helpers';
import { neutralCwd } from '../../src/common/cliPaths';
import { isProcessLive } from '../../src/registry/processLiveness';
import { SESSION_STARTING_RE } from '../../src/common/constants';

test('generate args map the prompts to `rtdebug vscode` flags', () => {
  assert.deepEqual(
    generateArgs({
      script: 't.py',
      mode: 'torchrun',
      nprocPerNode: 4,
      nnodes: 2,
      hosts: ['a', 'b'],
      portBase: 6000,
      wait: '0',
      python: '/py',
    }),
    [
      'vscode',
      '--script',
      't.py',
      '--mode',
      'torchrun',
      '--nproc-per-node',
      '4',
      '--nnodes',
      '2',
      '--hosts',
      'a,b',
      '--port-base',
      '6000',
      '--wait',
      '0',
      '--python',
      '/py',
      '--json',
    ],
  );
  assert.deepEqual(generateArgs({ script: 't.py', mode: 'run', nprocPerNode: 4 }), [
    'vscode',
    '--script',
    't.py',
    '--mode',
    'run',
    '--json',
  ]);
  assert.deepEqual(attachArgs(3, 's1', 5), ['attach', '--rank', '3', '--session', 's1', '--timeout', '5', '--json']);
});

test('job args: torchrun flags after the harness options, run mode', () => {
  const base: JobSpec = {
    python: 'py',
    module: 'rtdebug',
    mode: 'torchrun',
    script: 't.py',
    args: ['--lr', '1'],
    cwd: '/',
    env: {},
    portBase: 5678,
    host: '127.0.0.1',
    wait: 'all',
    nprocPerNode: 2,
  };
  assert.deepEqual(jobArgs(base), [
    '-m',
    'rtdebug',
    'torchrun',
    '--debug-port-base',
    '5678',
    '--debug-host',
    '127.0.0.1',
    '--wait',
    'all',
    '--nproc-per-node',
    '2',
    't.py',
    '--lr',
    '1',
  ]);
  assert.deepEqual(jobArgs({ ...base, torchrunArgs: ['--nproc-per-node=3'] }).slice(9), ['--nproc-per-node=3', 't.py', '--lr', '1']);
  assert.deepEqual(jobArgs({ ...base, mode: 'run', wait: 'none' }), [
    '-m',
    'rtdebug',
    'run',
    '--port',
    '5678',
    '--host',
    '127.0.0.1',
    't.py',
    '--lr',
    '1',
  ]);
  assert.deepEqual(jobArgs({ ...base, mode: 'run' }).slice(7, 8), ['--wait']);
  // the rtdebug.allStop setting off: the ranks' all-stop off for the job (on, the default, adds nothing)
  assert.deepEqual(jobArgs({ ...base, allStop: false }).slice(9, 10), ['--no-all-stop']);
  assert.deepEqual(jobArgs({ ...base, mode: 'run', allStop: false }).slice(7, 9), ['--wait', '--no-all-stop']);
  assert.deepEqual(jobArgs({ ...base, allStop: true }), jobArgs(base));
});

test('the session line of both launchers is recognised', () => {
  assert.equal(
    SESSION_STARTING_RE.exec('rtdebug: session 20261202-1-ab starting (2 local ranks, debug ports 5678-5679 on 127.0.0.1)')?.[1],
    '20261202-1-ab',
  );
  assert.equal(SESSION_STARTING_RE.exec('rtdebug: session 20261202-1-ab: debug endpoint 127.0.0.1:5678 (attach: …)')?.[1], '20261202-1-ab');
  assert.equal(SESSION_STARTING_RE.exec('rtdebug: session s stopped (exit code 0)'), null);
});

test('failures become one clear sentence', () => {
  const cmd = { python: '/venv/bin/python', module: 'rtdebug' };
  assert.match(describeFailure(cmd, ['attach'], { code: 'ENOENT', message: 'x' }, ''), /Python interpreter not found: \/venv\/bin\/python/);
  assert.match(
    describeFailure(cmd, ['attach'], { code: 1, message: 'x' }, '/venv/bin/python: No module named rtdebug\n'),
    /harness is not installed in \/venv\/bin\/python/,
  );
  assert.equal(
    describeFailure(cmd, ['attach'], { code: 1, message: 'x' }, 'Traceback\nrtdebug: error: no live session has rank 3\n'),
    '/venv/bin/python -m rtdebug attach failed: rtdebug: error: no live session has rank 3',
  );
  assert.match(describeFailure(cmd, ['ps'], { code: null, killed: true, message: 'x' }, ''), /timed out/);
});

test('runHarness reports a missing interpreter and a missing module', async () => {
  await assert.rejects(runHarness({ python: '/nonexistent/python', module: 'rtdebug' }, ['ps']), /Python interpreter not found/);
  const py = harnessPython() ?? 'python3';
  await assert.rejects(runHarness({ python: py, module: 'no_such_harness_mod' }, ['ps']), /not installed/);
});

test('JobProcess: reads the session id, stop() ends the whole process group', async () => {
  const dir = tmpDir();
  const fake = path.join(dir, 'fakepy');
  fs.writeFileSync(fake, `#!/bin/sh\necho "rtdebug: session abc-1 starting"\nsleep 60 &\necho $! > ${dir}/child.pid\nwait\n`, {
    mode: 0o755,
  });
  const lines: string[] = [];
  const job = new JobProcess(
    {
      python: fake,
      module: 'rtdebug',
      mode: 'run',
      script: 't.py',
      args: [],
      cwd: dir,
      env: process.env,
      portBase: 1,
      host: 'h',
      wait: 'none',
    },
    (l) => lines.push(l),
    500,
  );
  assert.equal(await job.sessionId, 'abc-1');
  await new Promise((r) => setTimeout(r, 100));
  const child = Number(fs.readFileSync(path.join(dir, 'child.pid'), 'utf8'));
  assert.ok(job.running);
  await job.stop();
  assert.ok(!job.running);
  await new Promise((r) => setTimeout(r, 100));
  assert.ok(!isProcessLive(child), 'the rank-like child must not outlive the job');
  assert.deepEqual(lines, ['rtdebug: session abc-1 starting']);
});

const py = harnessPython();
test(
  'real harness: `vscode --json` output merges into launch/tasks and is idempotent',
  { skip: !py && 'no harness interpreter' },
  async () => {
    const out = await generateConfigs(
      { python: py!, module: 'rtdebug' },
      { script: 'examples/plain_ddp.py', mode: 'torchrun', nprocPerNode: 2, wait: 'all', python: py! },
    );
    assert.ok(out.configurations.every((c) => String(c.name).startsWith('rtdebug: ')));
    // the package is `rtdebug`: the task runs it, and attach configs hide its frames by that module name
    assert.deepEqual((out.tasks[0].args as string[]).slice(0, 3), ['-m', 'rtdebug', 'torchrun']);
    for (const c of out.configurations.filter((x) => x.type === 'debugpy'))
      assert.deepEqual(c.rules, [{ module: 'rtdebug', include: false }], String(c.name));
    // the CLI runs in the neutral cwd: the entries still resolve the (relative) script and paths in the workspace
    assert.ok(!JSON.stringify(out).includes(neutralCwd()), 'the CLI cwd leaked into the entries');
    assert.deepEqual(out.tasks[0].options, { cwd: '${workspaceFolder}' });
    assert.equal((out.tasks[0].args as string[]).at(-1), 'examples/plain_ddp.py');
    for (const c of out.configurations.filter((x) => x.type === 'debugpy'))
      assert.deepEqual(c.pathMappings, [{ localRoot: '${workspaceFolder}', remoteRoot: '${workspaceFolder}' }]);
    const single = (await generateConfigs({ python: py!, module: 'rtdebug' }, { script: 'examples/local_linear.py', mode: 'run' }))
      .configurations[0];
    assert.deepEqual([single.module, single.args, single.cwd], ['rtdebug', ['run', 'examples/local_linear.py'], '${workspaceFolder}']);
    const files = applyGenerated('// mine\n{"version": "0.2.0", "configurations": [{"name": "x"}]}', '', out, 'examples/plain_ddp.py');
    const launch = jsonc.parse(files.launch);
    assert.ok(files.launch.startsWith('// mine\n'));
    assert.equal(launch.configurations[0].name, 'x');
    assert.ok(
      launch.configurations.some((c: { type: string; connect?: { port: number } }) => c.type === 'debugpy' && c.connect?.port === 5679),
    );
    assert.equal(launch.compounds.length, 1);
    assert.equal(jsonc.parse(files.tasks).tasks.length, 1);
    assert.deepEqual(applyGenerated(files.launch, files.tasks, out, 'examples/plain_ddp.py'), files);
  },
);
