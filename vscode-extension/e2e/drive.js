// The real-VS-Code e2e flow (see run.sh): generate configs through the prompts, start a 2-rank job,
// "Attach to All Ranks", check both ranks stopped at the breakpoint with their own world rank.
const { spawn } = require('child_process');
const fs = require('fs');
const path = require('path');
const wb = require('./workbench');
const { ranksFlow } = require('./ranksFlow');
const { stockFlow } = require('./stockFlow');
const { collectivesFlow } = require('./collectivesFlow');
const { stoponFlow } = require('./stoponFlow');
const { connectFlow } = require('./connectFlow');

const arg = (name) => {
  const i = process.argv.indexOf(`--${name}`);
  return i > 0 ? process.argv[i + 1] : undefined;
};
const plainLine = Number(arg('plain-line'));
const localLine = Number(arg('local-line'));
const url = arg('url'),
  run = arg('run'),
  python = arg('python'),
  script = arg('script'),
  line = Number(arg('line')),
  art = arg('artifacts');
const ws = path.join(run, 'ws');
const trace = process.env.RTDEBUG_E2E_TRACE;
const t0 = Date.now();
// E2E_ONLY=ranks,errors runs only those flows (development); default: all but "stock", which needs the
// Python Debugger installed (run.sh's E2E_MODE=stock selects it).
const only = (process.env.E2E_ONLY || '').split(',').filter(Boolean);
const want = (name) => (only.length ? only.includes(name) : name !== 'stock');
const step = (m) => console.log(`[vscode-e2e +${((Date.now() - t0) / 1000).toFixed(1)}s] ${m}`);
const check = (ok, what) => {
  if (!ok) throw new Error(`CHECK FAILED: ${what}`);
  step(`ok: ${what}`);
};
const traceLines = () =>
  fs.existsSync(trace)
    ? fs
        .readFileSync(trace, 'utf8')
        .trim()
        .split('\n')
        .filter(Boolean)
        .map((l) => JSON.parse(l))
    : [];
const readJsonc = (f) =>
  JSON.parse(
    fs
      .readFileSync(f, 'utf8')
      .replace(/^\s*\/\/.*$/gm, '')
      .replace(/,(\s*[\]}])/g, '$1'),
  );

async function generate(page, portBase) {
  await wb.runCommand(page, 'rtdebug: Generate Launch Configurations');
  await wb.pick(page, '(1/5)', 'examples/ddp_fashion.py');
  await wb.pick(page, '(2/5)', 'torchrun');
  await wb.answer(page, '--nproc-per-node', 2);
  await wb.answer(page, '--nnodes', 1);
  await wb.answer(page, 'debug port base', portBase);
  await wb.answer(page, 'wait policy', 'all');
  const launchFile = path.join(ws, '.vscode', 'launch.json');
  await wb.waitFor('launch.json with rtdebug entries', () => fs.readFileSync(launchFile, 'utf8').includes('rtdebug: attach rank 1'), 60000);
  await new Promise((r) => setTimeout(r, 1000));
  const text = fs.readFileSync(launchFile, 'utf8');
  check(text.includes("// the user's own comment: must survive the generator"), 'launch.json keeps the user comment');
  const launch = readJsonc(launchFile);
  const names = launch.configurations.map((c) => c.name);
  check(names[0] === 'My own config', 'the user config is still first');
  // names carry host:port unless loopback + default base (the harness's rank_config_name)
  const rankCfg = (r) => launch.configurations.find((c) => new RegExp(`^rtdebug: attach rank ${r}( \\(|$)`).test(c.name));
  const r0 = rankCfg(0);
  const r1 = rankCfg(1);
  check(
    r0 && r0.type === 'debugpy' && r0.connect.port === portBase && r1.connect.port === portBase + 1,
    'one debugpy attach per rank at base + rank',
  );
  check(launch.compounds.length === 1 && launch.compounds[0].configurations.length === 2, 'an "all ranks" compound');
  const tasks = readJsonc(path.join(ws, '.vscode', 'tasks.json'));
  const task = tasks.tasks.find((t) => t.label === launch.compounds[0].preLaunchTask);
  check(
    task && task.isBackground && task.args.includes('torchrun') && task.args.includes('all'),
    'its background preLaunchTask runs rtdebug torchrun --wait all',
  );
}

/** F5 on a `"type": "rtdebug"` launch config: the extension starts the job, attaches every rank; stop ends the job. */
async function f5Launch(page, name, script, line, ranks) {
  const before = traceLines().length;
  await wb.runCommand(page, 'Debug: Select and Start Debugging');
  await wb.pick(page, name, name);
  const stops = await wb.waitFor(
    `${name}: ${ranks.length} rank(s) stopped`,
    () => {
      const s = traceLines()
        .slice(before)
        .filter((e) => e.kind === 'stopped' && String(e.source).endsWith(script));
      return new Set(s.map((e) => e.rank)).size >= ranks.length ? s : undefined;
    },
    180000,
  );
  for (const rank of ranks) {
    const e = stops.find((x) => x.rank === rank);
    check(
      e.reason === 'breakpoint' && e.line === line && e.eval === String(rank) && e.parent === name,
      `${name}: rank ${rank} stopped at ${script}:${line} under the F5 session, its world rank evaluates to ${rank}`,
    );
  }
  const reg = process.env.RTDEBUG_REGISTRY_DIR;
  const sid = fs.readdirSync(reg).find((d) => {
    try {
      return fs.readFileSync(path.join(reg, d, 'session.json'), 'utf8').includes(script);
    } catch {
      return false;
    }
  });
  // only the entries (the harness may keep other files there, e.g. temp files of its atomic writes)
  const entries = fs
    .readdirSync(path.join(reg, sid))
    .filter((f) => f === 'session.json' || /^rank-\d+\.json$/.test(f))
    .map((f) => JSON.parse(fs.readFileSync(path.join(reg, sid, f), 'utf8')));
  const pids = entries.map((e) => e.launcher_pid || e.pid);
  check(
    pids.length === ranks.length + 1 && pids.every(wb.alive),
    `${name} started session ${sid}: launcher + ${ranks.length} rank(s) alive`,
  );
  await page.screenshot({ path: path.join(art, `vscode-e2e-f5-${script.replace('.py', '')}-stopped.png`) });
  await wb.runCommand(page, 'rtdebug e2e: Stop rtdebug Parent Sessions');
  await wb.waitFor(
    `the ${name} session to end`,
    () =>
      traceLines()
        .slice(before)
        .some((e) => e.kind === 'session-end' && e.name === name),
    60000,
  );
  await wb.waitFor(`the ${name} job processes to be gone`, () => !pids.some(wb.alive), 30000);
  step(`ok: stopping ${name} ended the job: launcher and rank(s) are gone (no orphans)`);
}

/** The generated "rtdebug: attach to rank…" config: asks for a rank, resolves it through the registry. */
async function attachOneRank(page) {
  const job = startJob(26000 + (process.pid % 500) * 4, ['--nproc-per-node', '1'], path.join(ws, 'examples', 'plain_ddp.py'));
  try {
    await wb.waitFor(
      'rtdebug: all 1 local ranks ready',
      () => job.out.some((l) => l.startsWith('rtdebug: all 1 local ranks ready')),
      120000,
    );
    const before = traceLines().length;
    await wb.runCommand(page, 'Debug: Select and Start Debugging');
    await wb.pick(page, 'rtdebug: attach to rank', 'rtdebug: attach to rank…');
    await wb.answer(page, 'Rank to attach to', 0);
    const e = await wb.waitFor(
      'rank 0 stopped',
      () =>
        traceLines()
          .slice(before)
          .find((x) => x.kind === 'stopped' && String(x.source).endsWith('plain_ddp.py')),
      120000,
    );
    check(
      e.rank === 0 && e.parent === null && e.eval === '0' && e.line === plainLine,
      '"rtdebug: attach to rank…" with input 0 attached rank 0 and stopped at the breakpoint',
    );
    await wb.runCommand(page, 'Debug: Stop');
    check((await wb.withTimeout(job.exited, 120000, 'timeout')) === 0, 'after Debug: Stop (detach) the 1-rank job finishes with exit 0');
  } finally {
    if (job.job.exitCode === null) {
      try {
        process.kill(-job.job.pid, 'SIGTERM');
      } catch {
        /* gone */
      }
    }
  }
}

/** The three ways F5 can go wrong: one clear message each, and no process left behind. */
async function errorPaths(page) {
  const cases = [
    ['E2E missing script', 'script not found'],
    ['E2E no harness', 'harness is not installed'],
    ['E2E never ready', 'ranks never became ready within 8 s'],
  ];
  for (const [name, text] of cases) {
    await wb.runCommand(page, 'Debug: Select and Start Debugging');
    await wb.pick(page, name, name);
    const shown = await wb.waitFor(`the "${text}" message`, async () => (await wb.notificationsText(page)).includes(text), 60000);
    check(shown, `${name}: VS Code shows "rtdebug: …${text}…"`);
    await wb.runCommand(page, 'Notifications: Clear All Notifications');
  }
  const reg = process.env.RTDEBUG_REGISTRY_DIR;
  const never = fs
    .readdirSync(reg)
    .map((d) => {
      try {
        return JSON.parse(fs.readFileSync(path.join(reg, d, 'session.json'), 'utf8'));
      } catch {
        return undefined;
      }
    })
    .filter((e) => e && e.command.includes('--nnodes'));
  check(never.length === 1, 'the never-ready job had started a session');
  await wb.waitFor('the never-ready job to be stopped', () => !wb.alive(never[0].launcher_pid), 30000);
  step('ok: the never-ready job was stopped (no orphan)');
}

function startJob(portBase, torchrunArgs = ['--nproc-per-node', '2'], target = script, wait = 'all') {
  const job = spawn(
    python,
    [
      '-m',
      'rtdebug',
      'torchrun',
      '--debug-port-base',
      String(portBase),
      '--wait',
      wait,
      ...torchrunArgs,
      target,
      '--epochs',
      '1',
      '--samples',
      '128',
    ],
    { cwd: ws, env: process.env, detached: true, stdio: ['ignore', 'pipe', 'pipe'] },
  );
  const out = [];
  for (const s of [job.stdout, job.stderr]) s.on('data', (d) => out.push(...d.toString().split('\n')));
  const exited = new Promise((r) => job.on('exit', (code) => r(code)));
  return { job, out, exited };
}

(async () => {
  const portBase = 24000 + (process.pid % 500) * 4;
  const { page, close } = await wb.openWorkbench(url);
  try {
    step('workbench loaded');
    // The tracer sets the breakpoints when it activates (onStartupFinished): slow under load.
    await wb.waitFor('the e2e tracer to activate', () => traceLines().some((e) => e.kind === 'breakpoint-set'), 120000);
    if (want('attach-all')) await attachAllFlow(page, portBase);
    if (want('f5')) {
      await f5Launch(page, 'F5 plain_ddp (rtdebug)', 'plain_ddp.py', plainLine, [0, 1]);
      await f5Launch(page, 'F5 local_linear (rtdebug run)', 'local_linear.py', localLine, [0]);
    }
    if (want('attach-one')) await attachOneRank(page);
    if (want('errors')) await errorPaths(page);
    // before ranks (it turns all-stop on) and collectives (it removes every breakpoint): connect checks that
    // each rank stops at the breakpoint by itself
    if (want('connect')) await connectFlow({ page, ws, art, python, check, step, traceLines, run });
    if (want('ranks')) await ranksFlow({ page, ws, art, python, check, step, traceLines, startJob, run });
    if (want('collectives')) await collectivesFlow({ page, ws, art, python, check, step, traceLines });
    if (want('stopon')) await stoponFlow({ page, ws, art, check, step, traceLines, startJob });
    if (want('stock'))
      await stockFlow({ page, ws, art, check, step, traceLines, startJob, plainLine, localLine, portBase: Number(arg('stock-port-base')) });
    await page.screenshot({ path: path.join(art, 'vscode-e2e-done.png') });
    console.log('VSCODE E2E PASSED');
  } catch (e) {
    console.error(`VSCODE E2E FAILED: ${e.message}`);
    await page.screenshot({ path: path.join(art, 'vscode-e2e-failure.png') }).catch(() => {});
    process.exitCode = 1;
  } finally {
    await wb.withTimeout(close(), 15000, undefined);
  }
  process.exit(process.exitCode || 0);
})();

/** Generate the configs through the prompts, start a 2-rank job, "Attach to All Ranks", stop the parent. */
async function attachAllFlow(page, portBase) {
  let job;
  try {
    await generate(page, portBase);
    job = startJob(portBase);
    await wb.waitFor(
      'rtdebug: all 2 local ranks ready',
      () => job.out.some((l) => l.startsWith('rtdebug: all 2 local ranks ready')),
      180000,
    );
    step('job ready');
    await wb.runCommand(page, 'rtdebug: Attach to All Ranks');
    const stops = await wb.waitFor(
      'both ranks stopped',
      () => {
        const s = traceLines().filter((e) => e.kind === 'stopped' && String(e.source).endsWith('ddp_fashion.py'));
        return new Set(s.map((e) => e.rank)).size >= 2 ? s : undefined;
      },
      180000,
    );
    for (const rank of [0, 1]) {
      const e = stops.find((x) => x.rank === rank);
      check(
        e.reason === 'breakpoint' && e.line === line && String(e.source).endsWith('ddp_fashion.py'),
        `rank ${rank} stopped at the breakpoint (line ${line})`,
      );
      check(e.eval === String(rank), `rank ${rank}: get_world_rank() evaluates to ${rank}`);
      check(
        e.type === 'rtdebug' && /^rtdebug: all ranks/.test(e.parent),
        `rank ${rank} session is type rtdebug (DebugAdapterServer fallback), under the "all ranks" parent`,
      );
    }
    await page.waitForTimeout(1500);
    const sb = await wb.statusBarText(page);
    check(sb.includes('rtdebug 2/2'), `status bar shows 2 attached / 2 live ranks (${sb.replace(/\s+/g, ' ').slice(0, 120)})`);
    await page.screenshot({ path: path.join(art, 'vscode-e2e-both-ranks-stopped.png') });
    // Stop the parent: both rank sessions end, the ranks are only detached (they resume and finish).
    await wb.runCommand(page, 'rtdebug e2e: Stop rtdebug Parent Sessions');
    await wb.waitFor(
      'parent and both rank sessions to end',
      () => {
        const ended = traceLines().filter(
          (e) => e.kind === 'session-end' && (/^rtdebug: all ranks/.test(e.name) || /^rtdebug: all ranks/.test(e.parent)),
        );
        return ended.length >= 3;
      },
      30000,
    );
    step('ok: stopping the "all ranks" parent ended both rank sessions');
    // Detached, not killed: a killed job ends by a signal or non-zero. (Whether it is still running here is a
    // race: the resumed ranks have about a second of work left, and under CI load the session can end later.)
    const code = await wb.withTimeout(job.exited, 120000, 'timeout');
    check(
      code === 0 && job.job.signalCode === null,
      `the detached ranks resume and the job exits 0, not killed (got ${code}, signal ${job.job.signalCode})`,
    );
  } catch (e) {
    if (job) console.error('--- job output (tail)\n' + job.out.slice(-20).join('\n'));
    throw e;
  } finally {
    if (job && job.job.exitCode === null) {
      try {
        process.kill(-job.job.pid, 'SIGTERM');
      } catch {
        /* gone */
      }
    }
  }
}
