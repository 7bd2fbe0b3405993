import * as assert from 'assert';
import { execFileSync } from 'child_process';
import * as fs from 'fs';
import * as path from 'path';
import { test } from 'node:test';
import { checkInstalled, interpreterFlags, runHarness } from '../../src/common/harnessCli';
import { jobArgs } from '../../src/attach/launch/jobProcess';
import { cliFlags, FlagCache, parseVersion, rejectedFlag, VERSION_PROBE } from '../../src/common/pythonFlags';
import { harnessPython, tmpDir } from './helpers';

test('-P from Python 3.11 on, nothing before or when the version is unknown', () => {
  assert.deepEqual(parseVersion('3.12\n'), [3, 12]);
  assert.deepEqual(parseVersion('  3.9 '), [3, 9]);
  assert.equal(parseVersion('(3, 12)'), undefined);
  assert.equal(parseVersion('Python 3.12.1'), undefined);
  assert.equal(parseVersion(''), undefined);
  assert.deepEqual(cliFlags([3, 11]), ['-P']);
  assert.deepEqual(cliFlags([3, 13]), ['-P']);
  assert.deepEqual(cliFlags([4, 0]), ['-P']);
  assert.deepEqual(cliFlags([3, 10]), []);
  assert.deepEqual(cliFlags([2, 7]), []);
  assert.deepEqual(cliFlags(undefined), []);
  assert.deepEqual(VERSION_PROBE, ['-c', 'import sys; print("%d.%d" % sys.version_info[:2])']);
});

test("a rejected -P is recognised (Python 3.10's own words)", () => {
  assert.ok(rejectedFlag('Unknown option: -P\nusage: /usr/bin/python3.10 [option] ... [-c cmd | -m mod | file | -] [arg] ...\n'));
  assert.ok(!rejectedFlag('rtdebug: error: no live session\n'));
  assert.ok(!rejectedFlag('Unknown option: -X\n'));
});

test('the probe runs once per interpreter, shared by concurrent calls; a failed probe is not cached', async () => {
  const calls: string[] = [];
  let fail = true;
  const cache = new FlagCache(async (py) => {
    calls.push(py);
    await new Promise((r) => setTimeout(r, 10));
    if (py === 'broken' && fail) throw new Error('ENOENT');
    return py === 'old' ? '3.10\n' : '3.12\n';
  });
  assert.deepEqual(await Promise.all([cache.flags('new'), cache.flags('new'), cache.flags('old')]), [['-P'], ['-P'], []]);
  assert.deepEqual(await cache.flags('new'), ['-P']);
  assert.deepEqual(calls, ['new', 'old']);
  assert.deepEqual(await cache.flags('broken'), []);
  fail = false;
  assert.deepEqual(await cache.flags('broken'), ['-P'], 'probed again once the interpreter works');
  cache.forget('new');
  await cache.flags('new');
  assert.deepEqual(calls, ['new', 'old', 'broken', 'broken', 'new']);
});

/** A stand-in interpreter: answers the version probe with `version` and records every other argv. */
function fakePython(version: string, body = 'echo "$@" >> "$REC"'): { py: string; rec: string; probes: string } {
  const dir = tmpDir();
  const py = path.join(dir, 'fakepy');
  const rec = path.join(dir, 'argv');
  const probes = path.join(dir, 'probes');
  fs.writeFileSync(
    py,
    `#!/bin/sh\nREC=${rec}\nif [ "$1" = "-c" ] && [ "$2" = '${VERSION_PROBE[1]}' ]; then echo x >> ${probes}; echo ${version}; exit 0; fi\n${body}\n`,
    { mode: 0o755 },
  );
  return { py, rec, probes };
}

const lines = (f: string) => fs.readFileSync(f, 'utf8').trim().split('\n');

test('CLI calls get -P on an interpreter that has it, probed once; never an older one', async () => {
  const fresh = fakePython('3.12');
  await runHarness({ python: fresh.py, module: 'rtdebug' }, ['ps', '--json']);
  await runHarness({ python: fresh.py, module: 'rtdebug' }, ['stacks', '--json']);
  await checkInstalled({ python: fresh.py, module: 'rtdebug' });
  assert.deepEqual(lines(fresh.rec), ['-P -m rtdebug ps --json', '-P -m rtdebug stacks --json', '-P -c import rtdebug']);
  assert.deepEqual(lines(fresh.probes), ['x']);
  const old = fakePython('3.10');
  await runHarness({ python: old.py, module: 'rtdebug' }, ['ps', '--json']);
  assert.deepEqual(lines(old.rec), ['-m rtdebug ps --json']);
});

test('an interpreter that rejects -P after all is run again without it, and probed afresh next time', async () => {
  const f = fakePython('3.12', 'echo "$@" >> "$REC"\nif [ "$1" = "-P" ]; then echo "Unknown option: -P" >&2; exit 2; fi\necho ok');
  assert.equal((await runHarness({ python: f.py, module: 'rtdebug' }, ['ps'])).trim(), 'ok');
  assert.deepEqual(lines(f.rec), ['-P -m rtdebug ps', '-m rtdebug ps']);
  await runHarness({ python: f.py, module: 'rtdebug' }, ['ps']);
  assert.deepEqual(lines(f.probes), ['x', 'x']);
});

test("the user's own job (F5) never gets -P: its script's directory stays importable", () => {
  const a = jobArgs({
    python: 'py',
    module: 'rtdebug',
    mode: 'run',
    script: 't.py',
    args: [],
    cwd: '/',
    env: {},
    portBase: 1,
    host: 'h',
    wait: 'none',
  });
  assert.equal(a[0], '-m');
  assert.ok(!a.includes('-P'));
});

const real = harnessPython();
test(
  'with a real interpreter, the probed flags keep a planted module out even with the workspace as cwd',
  { skip: !real && 'no harness venv' },
  async () => {
    const version = parseVersion(execFileSync(real!, VERSION_PROBE, { encoding: 'utf8' }));
    const flags = await interpreterFlags.flags(real!);
    assert.deepEqual(flags, cliFlags(version));
    if (!flags.length) return; // Python < 3.11: the neutral cwd alone does it (trust.test.ts)
    const ws = tmpDir('rtdebug-evil-ws-');
    const mark = path.join(ws, 'RAN');
    fs.mkdirSync(path.join(ws, 'rtdebug_flag_probe'));
    fs.writeFileSync(path.join(ws, 'rtdebug_flag_probe', '__main__.py'), `open(${JSON.stringify(mark)}, "w").write("ran")\n`);
    assert.throws(
      () => execFileSync(real!, [...flags, '-m', 'rtdebug_flag_probe'], { cwd: ws, stdio: 'pipe' }),
      /No module named rtdebug_flag_probe/,
    );
    assert.ok(!fs.existsSync(mark));
    execFileSync(real!, ['-m', 'rtdebug_flag_probe'], { cwd: ws, stdio: 'pipe' }); // the control: without -P it runs
    assert.ok(fs.existsSync(mark));
  },
);
