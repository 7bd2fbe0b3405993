// "rtdebug: Connect to a Job on Another Machine…" in the real workbench (see run.sh): e2e/sshhost.py starts
// a real sshd on 127.0.0.1 (its own config, host key, user key, port) and a 2-rank job of
// e2e/fixtures/remote_ddp.py (--wait all) whose registry is its own, not the workbench's, and writes the
// workbench's ~/.ssh/config (code-server's HOME is $RUN/home). The flow runs the command through the
// palette, picks the host among the offered ~/.ssh/config hosts, gives how the host runs rtdebug, picks
// the session; the 2 ranks appear in the Ranks view (only connect can put them there); Attach to All Ranks
// stops both at the breakpoint with their own RANK; detach; the Ranks view's Stop Session disconnects:
// connect and its ssh children are gone, its local ports are free, the local session is gone from the
// workbench's registry, and the job runs on (it ends, exit 0, when the flow tells it to).
const { spawn } = require('child_process');
const fs = require('fs');
const net = require('net');
const path = require('path');
const wb = require('./workbench');

const ALIAS = 'rtd-e2e-node';

/** The pids whose parent is `pid` (from /proc), with their command names. */
function childrenOf(pid) {
  const out = [];
  for (const d of fs.readdirSync('/proc')) {
    if (!/^\d+$/.test(d)) continue;
    try {
      const stat = fs.readFileSync(`/proc/${d}/stat`, 'utf8');
      const rest = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
      if (Number(rest[1]) === pid) out.push({ pid: Number(d), comm: stat.slice(stat.indexOf('(') + 1, stat.lastIndexOf(')')) });
    } catch {
      /* gone meanwhile */
    }
  }
  return out;
}

/** Whether 127.0.0.1:port can be bound now (nothing listens there). */
const portFree = (port) =>
  new Promise((resolve) => {
    const s = net.createServer();
    s.once('error', () => resolve(false));
    s.listen(port, '127.0.0.1', () => s.close(() => resolve(true)));
  });

const readJson = (f) => {
  try {
    return JSON.parse(fs.readFileSync(f, 'utf8'));
  } catch {
    return undefined;
  }
};

/** sshhost.py in the background: its JSON lines as they come, its stderr kept for a failure's report. */
function startHost(python, run, ws) {
  const dir = path.join(run, 'sshhost');
  const stopFile = path.join(dir, 'stop-job');
  const script = path.join(ws, 'remote_ddp.py');
  const args = [path.join(__dirname, 'sshhost.py'), '--dir', dir, '--home', path.join(run, 'home'), '--alias', ALIAS];
  args.push('--script', script, '--port-base', String(28000 + (process.pid % 500) * 4), '--', '--stop-file', stopFile);
  const support = path.join(__dirname, '..', '..', 'tests'); // tests/support: the helpers sshhost.py shares
  const env = { ...process.env, PYTHONPATH: [support, process.env.PYTHONPATH].filter(Boolean).join(path.delimiter) };
  const proc = spawn(python, args, { stdio: ['pipe', 'pipe', 'pipe'], env });
  const lines = [];
  const err = [];
  let buf = '';
  proc.stdout.on('data', (d) => {
    buf += d.toString();
    for (let i; (i = buf.indexOf('\n')) >= 0; buf = buf.slice(i + 1)) lines.push(JSON.parse(buf.slice(0, i)));
  });
  proc.stderr.on('data', (d) => err.push(d.toString()));
  const exited = new Promise((r) => proc.on('exit', (code) => r(code)));
  return { proc, lines, err, exited, dir, stopFile };
}

async function connectFlow(ctx) {
  const { ws, python, check, run } = ctx;
  const reg = process.env.RTDEBUG_REGISTRY_DIR;
  const src = fs.readFileSync(path.join(ws, 'remote_ddp.py'), 'utf8').split('\n');
  const bp = src.findIndex((l) => l.includes('# BREAKPOINT: connect step')) + 1;
  const host = startHost(python, run, ws);
  try {
    const ready = await wb.waitFor(
      'sshd and the 2-rank job behind it',
      () => host.lines.find((l) => l.ready) || host.proc.exitCode !== null,
      180000,
    );
    if (ready === true || !ready.ready) throw new Error(`sshhost.py ended: ${host.err.join('').trim().split('\n').pop()}`);
    const sid = ready.sessions[0];
    check(
      ready.sessions.length === 1 && !fs.existsSync(path.join(reg, sid)),
      `sshd on 127.0.0.1:${ready.port} (pid ${ready.sshd_pid}) and job ${sid} ready; the workbench's registry does not have it`,
    );
    await flowConnected(ctx, { reg, sid, bp, host, ready });
  } catch (e) {
    console.error('--- sshhost.py stderr (tail)\n' + host.err.join('').slice(-2000));
    for (const f of ['job.log', 'sshd.log']) {
      const p = path.join(host.dir, f);
      if (fs.existsSync(p)) console.error(`--- ${f} (tail)\n` + fs.readFileSync(p, 'utf8').slice(-2000));
    }
    throw e;
  } finally {
    host.proc.stdin.end(); // sshhost.py ends the job (if still running) and sshd, by pid
    if ((await wb.withTimeout(host.exited, 60000, 'timeout')) === 'timeout') host.proc.kill('SIGTERM');
  }
}

/** From the command palette to the disconnect. */
async function flowConnected(ctx, { reg, sid, bp, host, ready }) {
  const { page, art, python, check, step, traceLines } = ctx;
  const before = traceLines().length;
  await wb.runCommand(page, 'rtdebug: Connect to a Job on Another Machine');
  await wb.waitQuickInput(page, 'which machine of the job?');
  const offered = await page.locator('.quick-input-widget').innerText();
  check(
    offered.includes('rtd-e2e-decoy') && offered.includes(ALIAS) && offered.includes('Another host'),
    `the command offers the hosts of ~/.ssh/config (${offered.replace(/\s+/g, ' ').trim()})`,
  );
  await wb.pick(page, 'which machine of the job?', ALIAS);
  await wb.answer(page, `how ${ALIAS} runs rtdebug`, `${python} -m rtdebug`);
  await wb.pick(page, `connect to which session on ${ALIAS}`, sid);
  const t0 = Date.now();
  const session = await wb.waitFor(
    `session ${sid} and its 2 ranks registered here by connect`,
    () => {
      // session.json is written before the rank entries: wait for both ranks' local ports too
      const s = readJson(path.join(reg, sid, 'session.json'));
      const ranked = [0, 1].every((r) => (readJson(path.join(reg, sid, `rank-${r}.json`)) || {}).port);
      return s && s.mode === 'connected' && ranked ? s : undefined;
    },
    60000,
  );
  const connectPid = session.launcher_pid;
  const ports = [0, 1].map((r) => (readJson(path.join(reg, sid, `rank-${r}.json`)) || {}).port);
  check(
    ports.every((p) => p && p !== ready.port) && wb.alive(connectPid),
    `connect (pid ${connectPid}) registered ${sid} here, mode connected, ranks at local ports ${ports.join(', ')} (${Date.now() - t0} ms)`,
  );
  const label = async (prefix) => {
    const row = wb.viewRow(page, prefix);
    return (await row.count()) ? (await row.getAttribute('aria-label', { timeout: 5000 }).catch(() => '')) || '' : '';
  };
  const rowText = (rank) => label(`rank ${rank},`);
  // no "Show Ranks View" here: on "rtdebug: connected" the command itself refreshes and reveals the view
  for (const r of [0, 1]) {
    await wb.waitFor(`rank ${r} in the Ranks view at its local port`, async () => (await rowText(r)).includes(`port ${ports[r]}`), 30000);
  }
  step(`ok: the Ranks view came up with both ranks ${Date.now() - t0} ms after the session pick`);
  const sessionRow = await label('rtdebug session');
  check(/remote_ddp\.py, 2 ranks/.test(sessionRow), `the Ranks view lists the connected session and its 2 ranks (${sessionRow})`);
  const sshKids = childrenOf(connectPid).filter((c) => c.comm === 'ssh');
  check(sshKids.length >= 1, `connect runs its ssh child(ren): ${sshKids.map((c) => c.pid).join(', ')}`);
  await page.screenshot({ path: path.join(art, 'vscode-e2e-connect-ranks.png') });

  await wb.runCommand(page, 'rtdebug: Attach to All Ranks');
  const stops = await wb.waitFor(
    'both remote ranks stopped',
    () => {
      const s = traceLines()
        .slice(before)
        .filter((e) => e.kind === 'stopped' && String(e.source).endsWith('remote_ddp.py'));
      return new Set(s.map((e) => e.rank)).size >= 2 ? s : undefined;
    },
    120000,
  );
  for (const rank of [0, 1]) {
    const e = stops.find((x) => x.rank === rank);
    check(
      e.reason === 'breakpoint' && e.line === bp && e.eval === String(rank) && /^rtdebug: all ranks/.test(e.parent),
      `through the tunnel, rank ${rank} stopped at remote_ddp.py:${bp} under "all ranks", its RANK is ${e.eval}`,
    );
  }
  await page.screenshot({ path: path.join(art, 'vscode-e2e-connect-stopped.png') });
  await wb.runCommand(page, 'rtdebug e2e: Stop rtdebug Parent Sessions');
  await wb.waitFor(
    'the parent and both rank sessions to end',
    () =>
      traceLines()
        .slice(before)
        .filter((e) => e.kind === 'session-end' && (/^rtdebug: all ranks/.test(e.name) || /^rtdebug: all ranks/.test(e.parent))).length >=
      3,
    30000,
  );
  step('ok: detached from both ranks');
  await disconnect(ctx, { reg, sid, host, connectPid, sshKids, ports, rowText });
}

/** The Ranks view's Stop Session on the connected session: `rtdebug stop` ends connect, not the job. */
async function disconnect(ctx, { reg, sid, host, connectPid, sshKids, ports, rowText }) {
  const { page, check } = ctx;
  await wb.clickRowAction(page, 'rtdebug session', 'Stop Session');
  await wb.waitFor('connect to end', () => !wb.alive(connectPid), 30000);
  await wb.waitFor('its ssh children to end', () => !sshKids.some((c) => wb.alive(c.pid)), 15000);
  await wb.waitFor('the local session to leave the registry', () => !fs.existsSync(path.join(reg, sid)), 15000);
  const free = await Promise.all(ports.map(portFree));
  check(
    free.every(Boolean),
    `disconnected: connect and ssh ${sshKids.map((c) => c.pid).join(', ')} gone, ${sid} gone from the workbench's registry, local ports ${ports.join(', ')} free`,
  );
  await wb.waitFor('the Ranks view to drop the session', async () => !(await rowText(0)) && !(await rowText(1)), 20000);
  check(
    host.lines.every((l) => !('job_exit' in l)) && wb.alive(host.lines.find((l) => l.ready).job_pid),
    'the job runs on after the disconnect',
  );
  fs.writeFileSync(host.stopFile, '');
  const end = await wb.waitFor('the job to end', () => host.lines.find((l) => 'job_exit' in l), 60000);
  check(end.job_exit === 0, `told to stop, the job's ranks finish together, exit ${end.job_exit}`);
}

module.exports = { connectFlow };
