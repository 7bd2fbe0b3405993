// --stop-on and mesh coordinates in the real workbench (issues 30, 31; see run.sh): a 2-rank job of
// e2e/fixtures/stopon_mesh.py (a dp=2 × tp=1 DeviceMesh, --wait none) runs un-attached; the Ranks view groups
// its ranks by dp; "Attach to Ranks…" refuses an unknown dimension with the CLI's line while typing, then
// attaches dp=(0,1); "Stop All Ranks When…" sets nonfinite on both running ranks and says so in one message;
// rank 1's loss goes NaN and both ranks stop, rank 1 (the origin) is the session that has the focus, and the
// view's group and rank rows say "stopped (nonfinite: …)".
const fs = require('fs');
const path = require('path');
const wb = require('./workbench');

async function stoponFlow(ctx) {
  const { page, ws, art, check, step, traceLines, startJob } = ctx;
  // all-stop on, as a user has it: a --stop-on stop must not make it pause the ranks that stop by themselves
  await wb.runCommand(page, 'rtdebug e2e: Turn All-Stop On');
  const script = path.join(ws, 'stopon_mesh.py');
  const nanFile = path.join(ws, 'stopon.nan');
  const label = async (prefix) =>
    (await wb
      .viewRow(page, prefix)
      .getAttribute('aria-label')
      .catch(() => '')) || '';
  const quick = () => page.locator('.quick-input-widget');
  const base = 28000 + (process.pid % 500) * 4;
  // this job's rank rows (an earlier flow's session may still be listed for a second)
  const rankRow = (r) => page.locator(`.pane-body .monaco-list-row[aria-label^="rank ${r},"][aria-label*="port ${base + r},"]`).first();
  const rankLabel = async (r) =>
    (await rankRow(r)
      .getAttribute('aria-label', { timeout: 1000 })
      .catch(() => '')) || '';
  const job = startJob(base, ['--nproc-per-node', '2'], script, 'none');
  const mark = traceLines().length;
  try {
    await wb.waitFor('the stopon job ready', () => job.out.some((l) => l.startsWith('rtdebug: all 2 local ranks ready')), 180000);
    const sid = /session (\S+)\)/.exec(job.out.find((l) => l.startsWith('rtdebug: all 2 local ranks ready')))[1];
    await wb.runCommand(page, 'rtdebug: Show Ranks View');
    // grouped by the first dim of the first mesh, once the ranks publish it: one collapsed row per coordinate
    await wb.waitFor(
      'group rows dp=0 and dp=1',
      async () => /^dp=0, 1 rank, 1 ready/.test(await label('dp=0,')) && /^dp=1, 1 rank, 1 ready/.test(await label('dp=1,')),
      60000,
    );
    check(!(await rankRow(1).isVisible()), `the ranks are grouped by dp, groups collapsed ("${await label('dp=1,')}")`);
    await page.screenshot({ path: path.join(art, 'vscode-e2e-ranks-grouped-by-dp.png') });

    await wb.runCommand(page, 'rtdebug: Attach to Ranks');
    // another flow's session still listed: the command asks which one first
    const first = await wb.waitFor(
      'the selector input',
      async () => {
        const t = await quick()
          .innerText()
          .catch(() => '');
        return t.includes('dimensions: dp (0-1), tp (0-0)') ? 'input' : t.includes('attach to ranks of') ? 'pick' : undefined;
      },
      30000,
    );
    if (first === 'pick') {
      await page.keyboard.type(sid, { delay: 15 });
      await quick().locator('.monaco-list-row', { hasText: sid }).first().click();
      await wb.waitQuickInput(page, 'dimensions: dp (0-1), tp (0-0)');
    }
    await page.keyboard.type('pp=0', { delay: 15 });
    const refusal = "--rank pp=0: unknown mesh dimension 'pp'; the dimensions are dp (0-1), tp (0-0)";
    await wb.waitFor('the selector refusal', async () => (await quick().innerText()).includes(refusal), 15000);
    check(true, `an unknown dimension is refused while typing, in the CLI's words: "${refusal}"`);
    await page.keyboard.press('Control+A');
    await page.keyboard.type('dp=(0,1)', { delay: 15 });
    await wb.waitFor('the selector preview', async () => (await quick().innerText()).includes('ranks 0-1 (2 of 2)'), 15000);
    await page.keyboard.press('Enter');
    const parent = `rtdebug: ranks 0-1 (${sid})`;
    await wb.waitFor(
      'both ranks attached under one parent',
      () => {
        const s = traceLines()
          .slice(mark)
          .filter((e) => e.kind === 'session-start' && e.parent === parent);
        return new Set(s.map((e) => e.rank)).size === 2;
      },
      120000,
    );
    step(`ok: Attach to Ranks… dp=(0,1) attached ranks 0 and 1 under "${parent}"`);

    await wb.runCommand(page, 'rtdebug: Stop All Ranks When');
    await wb.waitQuickInput(page, 'stop every rank when');
    await quick().locator('.monaco-list-row', { hasText: 'a NaN or Inf in the loss' }).first().click();
    await page.keyboard.press('Enter');
    const said = await wb.waitFor(
      'the answers message',
      async () => {
        const t = await wb.notificationsText(page);
        return t.includes('rtdebug: ranks 0-1 stop on nonfinite') ? t : undefined;
      },
      60000,
    );
    check(
      !!said,
      'Stop All Ranks When… nonfinite: both running ranks took it, said in one message ("rtdebug: ranks 0-1 stop on nonfinite")',
    );
    await wb.runCommand(page, 'Notifications: Clear All Notifications');

    const before = traceLines().length;
    fs.writeFileSync(nanFile, '');
    // the --stop-on stops of both ranks since trace line `from` (undefined until both stopped)
    const bothStopped = (from) => {
      const s = traceLines()
        .slice(from)
        .filter((e) => e.kind === 'stopped' && e.parent === parent && /^rtdebug --stop-on nonfinite: /.test(e.description || ''));
      return new Set(s.map((e) => e.rank)).size === 2 ? s : undefined;
    };
    const stops = await wb.waitFor('both ranks stopped by --stop-on', () => bothStopped(before), 120000);
    const s1 = stops.find((e) => e.rank === 1);
    const s0 = stops.find((e) => e.rank === 0);
    check(
      s1.preserveFocusHint === false && /\(origin\)/.test(s1.description) && s0.preserveFocusHint === true,
      `--stop-on stopped both ranks; rank 1 is the origin ("${s1.description}")`,
    );
    check(
      !traceLines()
        .slice(before)
        .some((e) => e.kind === 'stopped' && e.parent === parent && e.reason === 'pause'),
      'all-stop paused no rank: each stopped by itself',
    );
    const focused = await wb.waitFor(
      'the focus on rank 1',
      () => {
        const f = traceLines()
          .slice(before)
          .filter((e) => e.kind === 'active-stack-item' && e.id);
        return f.length && f[f.length - 1].rank === 1 ? f[f.length - 1] : undefined;
      },
      30000,
    );
    check(focused.rank === 1, 'the origin rank 1 is the session with the focus (its stack frame)');

    await wb.waitFor('group dp=1 says stopped', async () => /^dp=1, 1 rank, 1 stopped/.test(await label('dp=1,')), 30000);
    await wb.viewRow(page, 'dp=1,').click();
    await wb.waitFor('rank 1 row', async () => /^rank 1, stopped \(nonfinite: .*\(origin\)\)/.test(await rankLabel(1)), 30000);
    step(`ok: the Ranks view says "${(await rankLabel(1)).split(', local rank')[0]}"`);
    await page.screenshot({ path: path.join(art, 'vscode-e2e-stop-on-origin.png') });

    // Continue on the focused origin rank: every rank resumes (all-stop continues them all), the optimizer
    // applies the NaN gradients, and the next step's loss is non-finite on both: --stop-on fires again
    const mark2 = traceLines().length;
    await wb.runCommand(page, 'Debug: Continue');
    const again = await wb.waitFor('both ranks stopped again after Continue', () => bothStopped(mark2), 120000);
    // both ranks stopping again is the proof that both resumed
    check(
      again.every((e) => /\(origin\)/.test(e.description)),
      `Continue resumed every rank; --stop-on fired again at the next step, each rank an origin now ` +
        `("${again.find((e) => e.rank === 0).description}")`,
    );
  } catch (e) {
    console.error('--- stopon job output (tail)\n' + job.out.slice(-25).join('\n'));
    throw e;
  } finally {
    await wb.runCommand(page, 'rtdebug e2e: Stop rtdebug Parent Sessions').catch(() => {});
    if (job.job.exitCode === null) {
      try {
        process.kill(-job.job.pid, 'SIGTERM');
      } catch {
        /* gone */
      }
    }
    fs.rmSync(nanFile, { force: true });
  }
}

module.exports = { stoponFlow };
