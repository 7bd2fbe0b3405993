// Stepping that knows collectives and the stacks' verdict, in the real workbench (see run.sh, issue 21):
// a 2-rank job of coll_loop.py, both ranks attached ("Attach to All Ranks") and stopped at the breakpoint on
// an all_reduce line; with all-stop on, "rtdebug: Step All Ranks" steps both over it (each then sees the
// reduced value); "rtdebug: Run All Ranks to Next Collective" stops both at the next all_reduce, and the
// Ranks view shows each rank's op and sequence number. Then the hang example, running un-attached:
// "Show Stacks of All Ranks" leads with the verdict, and its "Attach to rank 1" row attaches the culprit.
const fs = require('fs');
const path = require('path');
const { execFileSync, spawn } = require('child_process');
const wb = require('./workbench');

function spawnJob(python, ws, portBase, wait, script, args, nproc = 2) {
  // its own rendezvous port (torchrun's default 29500 may be another job's on a shared machine)
  const tr = ['--nproc-per-node', String(nproc), '--master-addr', '127.0.0.1', '--master-port', String(portBase + nproc)];
  const job = spawn(python, ['-m', 'rtdebug', 'torchrun', '--debug-port-base', String(portBase), '--wait', wait, ...tr, script, ...args], {
    cwd: ws,
    env: process.env,
    detached: true,
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  const out = [];
  for (const s of [job.stdout, job.stderr]) s.on('data', (d) => out.push(...d.toString().split('\n')));
  const exited = new Promise((r) => job.on('exit', (code) => r(code)));
  const tail = () => out.filter(Boolean).slice(-25).join('\n');
  return {
    job,
    out,
    exited,
    tail,
    kill: () => {
      if (job.exitCode === null) {
        try {
          process.kill(-job.pid, 'SIGTERM');
        } catch {
          /* gone */
        }
      }
    },
  };
}

/** Earlier flows' sessions may still be listed as live: when a command asks which session, pick `label`'s. */
async function pickIfAsked(page, title, label) {
  try {
    await wb.waitQuickInput(page, title, 4000);
  } catch {
    return;
  } // only one candidate: the command did not ask
  await page.keyboard.type(label, { delay: 15 });
  const row = page.locator('.quick-input-widget .monaco-list-row', { hasText: label }).first();
  await row.waitFor({ state: 'visible', timeout: 20000 });
  await row.click();
}

const sessionOf = (job) => (job.out.join('\n').match(/all \d+ local ranks ready \(session (\S+)\)/) || [])[1] || '';

/** Each rank's last collective in the newest live session of `script`, from `rtdebug ps --json`. */
function collectivesOf(python, script) {
  try {
    const d = JSON.parse(execFileSync(python, ['-m', 'rtdebug', 'ps', '--json'], { env: process.env, encoding: 'utf8', timeout: 30000 }));
    const s = d.sessions.filter((x) => String(x.script || '').endsWith(script)).pop();
    return s ? s.ranks.map((r) => r.collective) : [];
  } catch {
    return [];
  }
}

async function collectivesFlow(ctx) {
  const { page, ws, art, python, check, step, traceLines } = ctx;
  const script = path.join(ws, 'coll_loop.py');
  const L =
    fs
      .readFileSync(script, 'utf8')
      .split('\n')
      .findIndex((l) => l.includes('# BREAKPOINT: coll all_reduce')) + 1;
  const stopsOf = (from) =>
    traceLines()
      .slice(from)
      .filter((e) => e.kind === 'stopped' && String(e.source).endsWith('coll_loop.py'));
  const rowText = async (prefix) => (await wb.viewRow(page, prefix).getAttribute('aria-label')) || '';
  const both = (from, what, pred) =>
    wb.waitFor(
      what,
      () => {
        const s = stopsOf(from).filter(pred);
        const last = [0, 1].map((r) => s.filter((e) => e.rank === r).pop());
        return last.every(Boolean) ? last : undefined;
      },
      120000,
    );
  const job = spawnJob(python, ws, 28000 + (process.pid % 500) * 4, 'all', script, ['--steps', '6', '--sleep', '0']);
  try {
    await wb.waitFor('the coll_loop job ready', () => job.out.some((l) => l.startsWith('rtdebug: all 2 local ranks ready')), 180000);
    // both ranks must reach the breakpoint on their own: all-stop (left on by the ranks flow) would pause
    // the second wherever it is when the first stops
    let mark = traceLines().length;
    await wb.runCommand(page, 'rtdebug e2e: Turn All-Stop Off');
    await wb.waitFor(
      'all-stop off',
      () =>
        traceLines()
          .slice(mark)
          .some((e) => e.kind === 'setting' && e.allStop === false),
      20000,
    );
    mark = traceLines().length;
    await wb.runCommand(page, 'rtdebug: Attach to All Ranks');
    await pickIfAsked(page, 'attach to all ranks of', sessionOf(job));
    await both(mark, 'both ranks at the all_reduce breakpoint', (e) => e.line === L && e.reason === 'breakpoint');
    step(`ok: both ranks stopped at the all_reduce line ${L}`);
    mark = traceLines().length;
    await wb.runCommand(page, 'rtdebug e2e: Turn All-Stop On');
    await wb.waitFor(
      'all-stop on',
      () =>
        traceLines()
          .slice(mark)
          .some((e) => e.kind === 'setting' && e.allStop === true),
      20000,
    );
    await wb.runCommand(page, 'rtdebug e2e: Remove All Breakpoints');
    await wb.waitFor('breakpoints removed', () => traceLines().some((e) => e.kind === 'breakpoints-removed'), 20000);

    mark = traceLines().length;
    await wb.runCommand(page, 'rtdebug: Step All Ranks');
    const steps = await both(mark, 'both ranks stepped over the all_reduce', (e) => e.reason === 'step');
    for (const e of steps)
      check(
        e.line === L + 1 && e.eval === '2.0',
        `Step All Ranks: rank ${e.rank} stepped over the all_reduce to line ${e.line}, its tensor reduced (${e.eval})`,
      );
    await page.screenshot({ path: path.join(art, 'vscode-e2e-step-all-ranks.png') });

    mark = traceLines().length;
    await wb.runCommand(page, 'rtdebug: Run All Ranks to Next Collective');
    const at = await both(mark, 'both ranks at their next collective', () => true);
    for (const e of at)
      check(e.line === L, `Run to Next Collective: rank ${e.rank} stopped at the next all_reduce (line ${e.line}, reason ${e.reason})`);
    await wb.runCommand(page, 'rtdebug: Show Ranks View');
    for (const r of [0, 1]) {
      const t = await wb.waitFor(
        `rank ${r} row shows ALLREDUCE #2`,
        async () => {
          const x = await rowText(`rank ${r},`);
          return /at ALLREDUCE #2, not run yet/.test(x) ? x : undefined;
        },
        30000,
      );
      step(`ok: the Ranks view: ${t.split(', local rank')[0]}`);
    }
    const sess = await page.locator('.pane-body .monaco-list-row[aria-label^="rtdebug session"]').first().getAttribute('aria-label');
    check(/all at ALLREDUCE #2/.test(sess), `the session row says every rank is at the same collective (${sess})`);
    await page.screenshot({ path: path.join(art, 'vscode-e2e-run-to-next-collective.png') });
    await wb.runCommand(page, 'rtdebug: Continue All Ranks');
    check((await wb.withTimeout(job.exited, 120000, 'timeout')) === 0, 'Continue All Ranks: the loop finishes, the job exits 0');
  } finally {
    job.kill();
  }
  await verdictFlow(ctx);
}

/** The hang example on 3 ranks, un-attached (rank 1 skips; one against one, the records could not say
 * which side skipped): the Rank Stacks view leads with the verdict; one click attaches the culprit. */
async function verdictFlow({ page, ws, art, python, check, step, traceLines }) {
  const hang = spawnJob(python, ws, 28200 + (process.pid % 500) * 4, 'none', path.join(ws, 'examples', 'hang.py'), ['--steps', '2'], 3);
  try {
    // every rank inside its third collective (rank 1 in another one), as `rtdebug ps --json` reads the record
    const inside = await wb.waitFor(
      'the hang ranks inside their third collective',
      () => {
        const c = collectivesOf(python, 'hang.py');
        return c.length === 3 && c.every((x) => x && x.state === 'entered' && x.seq === 3) ? c : undefined;
      },
      180000,
    );
    step(`the hang job: ${inside.map((c, r) => `rank ${r} in ${c.op} #${c.seq}`).join(', ')}`);
    if (hang.job.exitCode !== null) throw new Error(`the hang job ended (exit ${hang.job.exitCode}):\n${hang.tail()}`);
    await wb.runCommand(page, 'rtdebug: Show Stacks of All Ranks');
    await pickIfAsked(page, 'show the stacks of which session', sessionOf(hang));
    // the view may still show an earlier job's report until this one's answer arrives: wait for this job's
    const verdict = page.locator('.pane-body .monaco-list-row[aria-label^="verdict: "][aria-label*="hang.py"]').first();
    await verdict.waitFor({ state: 'visible', timeout: 60000 });
    const label = await verdict.getAttribute('aria-label');
    // the harness names rank 1 by its Flight Recorder position ("rank 1 is in BARRIER #3 …, which ranks 0,2
    // never entered"), or, with the recorder off, by the record ("rank 1 never entered ALLREDUCE #3 …")
    check(
      /^verdict: rank 1 (is in BARRIER #3 \(hang\.py:\d+\), which ranks 0,2 never entered|never entered ALLREDUCE #3 \(hang\.py:\d+\))/.test(
        label,
      ),
      `the Rank Stacks view leads with the verdict (${label})`,
    );
    const rows = await page
      .locator('.pane-body .monaco-list-row[aria-label^="verdict: "] ~ .monaco-list-row, .pane-body .monaco-list-row')
      .allInnerTexts();
    step(`Rank Stacks rows: ${rows.slice(0, 4).join(' | ').replace(/\s+/g, ' ')}`);
    await page.screenshot({ path: path.join(art, 'vscode-e2e-stacks-verdict.png') });
    const mark = traceLines().length;
    await page.locator('.pane-body .monaco-list-row[aria-label="attach to rank 1"]').first().click();
    const s = await wb.waitFor(
      'a debug session on rank 1',
      () =>
        traceLines()
          .slice(mark)
          .find((e) => e.kind === 'session-start' && e.rank === 1),
      60000,
    );
    check(s.rank === 1, `one click on "Attach to rank 1" attached the culprit (${s.name})`);
    await historyRows(page, check, step, art);
  } finally {
    hang.kill();
  }
}

/** The "Collective history" node at the end of the Rank Stacks view (`stacks --history 16`). The pane is a
 * few rows high and the list renders only what it shows, so the tree is focused and walked with the keys
 * (End, then Up): its last row marks where the ranks part (or says which ranks have no Flight Recorder
 * history), and above it the node names the group. */
async function historyRows(page, check, step, art) {
  // the open group's rows are fetched after the group row itself (seen once under load: End landed on the
  // group): walk to the end again until the last row is a history row, or give up and check what is there
  const lastRow = async () => {
    await page.locator('.pane-body .monaco-list-row[aria-label^="verdict: "]').first().click();
    await page.keyboard.press('End');
    const last = page.locator('.pane-body .monaco-list-row.focused').first();
    await last.waitFor({ state: 'visible', timeout: 30000 });
    return (await last.getAttribute('aria-label')) || '';
  };
  const isHistoryRow = (r) => /^sequence \d+, /.test(r) || /^no Flight Recorder history from /.test(r);
  const row = await wb
    .waitFor('the history rows', async () => ((r) => (isHistoryRow(r) ? r : undefined))(await lastRow()), 20000)
    .catch(lastRow);
  step(`Rank Stacks, last row: ${row}`);
  const parted = /^sequence \d+, first divergence: /.test(row);
  check(
    (parted && /BARRIER/.test(row)) || /^no Flight Recorder history from /.test(row),
    `the history's last row marks where rank 1 went to the barrier, or says there is no recorder (${row})`,
  );
  const node = page.locator('.pane-body .monaco-list-row[aria-label^="collective history, "]').first();
  for (let i = 0; i < 40 && !(await node.isVisible()); i++) await page.keyboard.press('ArrowUp');
  const label = await node.getAttribute('aria-label', { timeout: 5000 });
  check(
    parted ? /^collective history, ranks part in group /.test(label) : /^collective history, no Flight Recorder history/.test(label),
    `the Collective history node says so too (${label})`,
  );
  await page.screenshot({ path: path.join(art, 'vscode-e2e-stacks-history.png') });
}

module.exports = { collectivesFlow };
