// The stock Python Debugger path (run.sh with E2E_MODE=stock: ms-python.python + ms-python.debugpy built
// from source, /work/shared/vscode-python-debugger): the generated "type": "debugpy" configurations in
// .vscode/launch.json run as users run them — the single-process launch, one rank's attach config, and the
// "all ranks" compound with its background task — each stopping at the breakpoint in the right rank.
const fs = require('fs');
const path = require('path');
const wb = require('./workbench');

const alive = (pid) => {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
};

async function selectAndStart(page, name) {
  await wb.runCommand(page, 'Debug: Select and Start Debugging');
  await wb.pick(page, name, name);
}

async function stockFlow(ctx) {
  const { page, ws, art, check, step, traceLines, startJob, plainLine, localLine, portBase } = ctx;
  const launch = fs.readFileSync(path.join(ws, '.vscode', 'launch.json'), 'utf8');
  const cfgName = (re) => {
    const m = launch.match(re);
    if (!m) throw new Error(`no config matching ${re} in launch.json`);
    return m[1];
  };
  const stopsIn = (from, file) =>
    traceLines()
      .slice(from)
      .filter((e) => e.kind === 'stopped' && String(e.source).endsWith(file));

  // 1. single process: "type": "debugpy", "request": "launch" of `python -m rtdebug run examples/local_linear.py`
  const single = cfgName(/"name": "(rtdebug: examples\/local_linear\.py \(single process\))"/);
  let mark = traceLines().length;
  await selectAndStart(page, single);
  const e1 = await wb.waitFor('the single-process launch to stop', () => stopsIn(mark, 'local_linear.py')[0], 180000);
  check(
    e1.type === 'debugpy' && e1.request === 'launch' && e1.reason === 'breakpoint' && e1.line === localLine && e1.eval === '0',
    `stock debugpy launch "${single}" stopped at local_linear.py:${localLine}, world rank 0`,
  );
  await page.screenshot({ path: path.join(art, 'vscode-e2e-stock-single-process.png') });
  await wb.runCommand(page, 'Debug: Stop');
  await wb.waitFor(
    'the launch session to end',
    () =>
      traceLines()
        .slice(mark)
        .some((e) => e.kind === 'session-end' && e.name === single),
    60000,
  );
  step('ok: Debug: Stop ended the single-process launch');

  // 2. one rank: "rtdebug: attach rank 1 (host:port)" against a running job whose rank 1 waits for it
  const job = startJob(portBase, ['--nproc-per-node', '2'], path.join(ws, 'examples', 'plain_ddp.py'), '1');
  try {
    await wb.waitFor(
      'the job ready',
      () => {
        if (job.job.exitCode !== null)
          throw new Error(`the job exited (${job.job.exitCode}) before its ranks were ready:\n${job.out.slice(-15).join('\n')}`);
        return job.out.some((l) => l.startsWith('rtdebug: all 2 local ranks ready'));
      },
      240000,
    );
    const rank1 = cfgName(/"name": "(rtdebug: attach rank 1 \([^)]*\))"/);
    mark = traceLines().length;
    await selectAndStart(page, rank1);
    const e2 = await wb.waitFor('rank 1 to stop', () => stopsIn(mark, 'plain_ddp.py')[0], 120000);
    check(
      e2.type === 'debugpy' && e2.name === rank1 && e2.reason === 'breakpoint' && e2.line === plainLine && e2.eval === '1',
      `stock debugpy attach "${rank1}" stopped at plain_ddp.py:${plainLine} in rank 1`,
    );
    // Disconnect (the toolbar's button on an attach session) leaves the rank running; "Debug: Stop" sends
    // disconnect with terminateDebuggee: true, which debugpy honours by ending the rank (and so the job).
    await wb.runCommand(page, 'Debug: Disconnect');
    const code = await wb.withTimeout(job.exited, 120000, 'timeout');
    if (code !== 0)
      console.error(
        '--- job output (tail)\n' +
          job.out
            .filter((l) => l.trim())
            .slice(-120)
            .join('\n'),
      );
    check(code === 0, `after Debug: Disconnect the job finishes with exit 0 (got ${code})`);
  } catch (e) {
    console.error(
      '--- job output (tail)\n' +
        job.out
          .filter((l) => l.trim())
          .slice(-40)
          .join('\n'),
    );
    throw e;
  } finally {
    if (job.job.exitCode === null) {
      try {
        process.kill(-job.job.pid, 'SIGTERM');
      } catch {
        /* gone */
      }
    }
  }

  // 3. the compound: its preLaunchTask starts `rtdebug torchrun`, then both rank configs attach
  const compound = cfgName(/"name": "(rtdebug: all ranks \(examples\/plain_ddp\.py\))"/);
  mark = traceLines().length;
  const t3 = Date.now();
  await selectAndStart(page, compound);
  const both = await wb.waitFor(
    'both ranks to stop',
    () => {
      const s = stopsIn(mark, 'plain_ddp.py');
      return new Set(s.map((e) => e.eval)).size >= 2 ? s : undefined;
    },
    240000,
  );
  for (const r of [0, 1]) {
    const e = both.find((x) => x.eval === String(r));
    check(
      e && e.type === 'debugpy' && e.name.startsWith(`rtdebug: attach rank ${r} (`) && e.reason === 'breakpoint' && e.line === plainLine,
      `compound "${compound}": "${e && e.name}" stopped at plain_ddp.py:${plainLine} and evaluates rank ${r}`,
    );
  }
  const reg = process.env.RTDEBUG_REGISTRY_DIR;
  const sess = fs
    .readdirSync(reg)
    .map((d) => {
      try {
        return JSON.parse(fs.readFileSync(path.join(reg, d, 'session.json'), 'utf8'));
      } catch {
        return undefined;
      }
    })
    .filter((e) => e && e.port_base === portBase && e.started_at * 1000 >= t3 - 2000)
    .pop();
  check(sess && alive(sess.launcher_pid), `the compound's background task started the job (session ${sess && sess.session_id})`);
  await page.screenshot({ path: path.join(art, 'vscode-e2e-stock-compound.png') });
  await wb.runCommand(page, 'rtdebug e2e: Remove All Breakpoints');
  await wb.waitFor('the breakpoints removed', () => traceLines().some((e) => e.kind === 'breakpoints-removed'), 20000);
  await wb.runCommand(page, 'rtdebug: Continue All Ranks');
  await wb.waitFor('the compound job to finish', () => !alive(sess.launcher_pid), 180000);
  step('ok: rtdebug: Continue All Ranks (stock debugpy sessions, recognised by endpoint) let the job finish');
}

module.exports = { stockFlow };
