// The README's picture: VS Code stopped in rank 1 of a 2-rank DDP job, the Ranks view beside it.
const path = require('path');
const wb = require('./workbench');

async function pictureFlow(ctx) {
  const { page, ws, art, check, step, traceLines, startJob } = ctx;
  await wb.runCommand(page, 'rtdebug e2e: Turn All-Stop On');
  await wb.waitFor('all-stop on', () => traceLines().some((e) => e.kind === 'setting' && e.allStop === true), 20000);
  const script = path.join(ws, 'picture_ddp.py');
  const job = startJob(28000 + (process.pid % 500) * 4, ['--nproc-per-node', '2'], script, 'all');
  try {
    await wb.waitFor('the picture job ready', () => job.out.some((l) => l.startsWith('rtdebug: all 2 local ranks ready')), 180000);
    await wb.runCommand(page, 'rtdebug: Show Ranks View');
    const before = traceLines().length;
    await wb.runCommand(page, 'rtdebug: Attach to All Ranks');
    const s = await wb.waitFor(
      'rank 1 at its breakpoint',
      () =>
        traceLines()
          .slice(before)
          .find((e) => e.kind === 'stopped' && e.rank === 1 && String(e.source).endsWith('picture_ddp.py')),
      180000,
    );
    check(s.reason === 'breakpoint' && s.eval === '1', `rank 1 stopped at the breakpoint (line ${s.line}), dist.get_rank() = 1`);
    const rowText = async (rank) => (await wb.viewRow(page, `rank ${rank},`).getAttribute('aria-label')) || '';
    await wb.waitFor('the Ranks view shows rank 1 stopped', async () => /stopped \(breakpoint\)/.test(await rowText(1)), 30000);
    await wb.waitFor('the Ranks view shows rank 0 blocked or paused', async () => /blocked|stopped/.test(await rowText(0)), 30000).catch(() => {});
    step(`rank 0: ${await rowText(0)} / rank 1: ${await rowText(1)}`);
    for (const name of ['Watch', 'Breakpoints']) {
      const h = page.locator('.part.sidebar .pane-header', { hasText: new RegExp(`^${name}`) }).first();
      if ((await h.count()) && (await h.getAttribute('aria-expanded')) === 'true') await h.click();
    }
    await wb.runCommand(page, 'View: Toggle Panel Visibility').catch(() => {});
    await page.keyboard.press('Escape');
    const sash = page.locator('.part.sidebar + .monaco-sash, .monaco-sash.vertical').first();
    const box = await page.locator('.part.sidebar').boundingBox();
    if (box && (await sash.count())) {
      await page.mouse.move(box.x + box.width + 1, box.y + 300);
      await page.mouse.down();
      await page.mouse.move(box.x + 540, box.y + 300, { steps: 8 });
      await page.mouse.up();
    }
    await page.waitForTimeout(2500);
    await page.screenshot({ path: path.join(art, 'readme-rank1-stopped.png') });
    step('ok: picture taken');
  } finally {
    try {
      process.kill(-job.job.pid, 'SIGTERM');
    } catch {}
  }
}

module.exports = { pictureFlow };
