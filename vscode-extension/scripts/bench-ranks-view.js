#!/usr/bin/env node
/**
 * Measures (asserts nothing) the Ranks view at 1024 ranks (issue 31): 1024 synthetic rank entries, each with a
 * dp × tp DeviceMesh, are written into a private registry directory; the extension's own RegistryWatcher reads
 * them as it does every second and its own RanksView builds the tree. VS Code's side is stood in for by what it
 * asks the provider: getChildren/getTreeItem of every node it shows (sessions expanded, groups collapsed) and,
 * after a change, getTreeItem of each node the view fired plus the children of the expanded ones. The time VS
 * Code itself spends (IPC to the renderer, painting) is not in these numbers. Last, the same registry is
 * listed by `rtdebug ps --json`, to compare a poll through the CLI with the extension's own reader.
 *
 *   node scripts/bench-ranks-view.js [--ranks 1024] [--tp 8] [--repeat 7]      (after npm run build)
 */
const fs = require('fs');
const os = require('os');
const path = require('path');
const Module = require('module');
const { performance } = require('perf_hooks');

const arg = (name, dflt) => {
  const i = process.argv.indexOf(`--${name}`);
  return i > 0 ? Number(process.argv[i + 1]) : dflt;
};
const N = arg('ranks', 1024);
const TP = arg('tp', 8);
const REPEAT = arg('repeat', 7);

// The few VS Code API pieces the watcher and the view touch, as plain objects.
class EventEmitter {
  constructor() {
    this.ls = [];
    this.event = (l) => (this.ls.push(l), { dispose: () => (this.ls = this.ls.filter((x) => x !== l)) });
  }
  fire(v) {
    for (const l of this.ls) l(v);
  }
  dispose() {
    this.ls = [];
  }
}
const none = () => ({ dispose() {} });
const vscode = {
  EventEmitter,
  TreeItem: class {
    constructor(label, collapsibleState) {
      Object.assign(this, { label, collapsibleState });
    }
  },
  ThemeIcon: class {
    constructor(id, color) {
      Object.assign(this, { id, color });
    }
  },
  ThemeColor: class {
    constructor(id) {
      this.id = id;
    }
  },
  TreeItemCollapsibleState: { None: 0, Collapsed: 1, Expanded: 2 },
  workspace: { isTrusted: true, getConfiguration: () => ({ get: (_k, d) => d, inspect: () => undefined }), workspaceFolders: [] },
  debug: { onDidStartDebugSession: none, onDidTerminateDebugSession: none },
  extensions: { getExtension: () => undefined },
};
const load = Module._load;
Module._load = function (request, ...rest) {
  return request === 'vscode' ? vscode : load.call(this, request, ...rest);
};

const OUT = path.join(__dirname, '..', 'out', 'src');
const { RegistryWatcher } = require(path.join(OUT, 'registry', 'registryWatcher'));
const { RanksView } = require(path.join(OUT, 'ranks', 'ranksView'));
const { RankDebugStates } = require(path.join(OUT, 'attach', 'allstop', 'rankDebugState'));
const { AttachService } = require(path.join(OUT, 'attach', 'rank', 'attachService'));
const { linuxCreateTime } = require(path.join(OUT, 'registry', 'processLiveness'));

// A registry with one session of N ranks, all "this process" (so the liveness check passes, as for live ranks).
const root = fs.mkdtempSync(path.join(os.tmpdir(), 'rtdebug-bench-'));
const sid = '20261206-120000-beef';
const sdir = path.join(root, sid);
fs.mkdirSync(sdir, { mode: 0o700 });
const created = linuxCreateTime(process.pid) ?? 0;
const now = Date.now() / 1000;
fs.writeFileSync(
  path.join(sdir, 'session.json'),
  JSON.stringify({
    schema_version: 1, kind: 'session', session_id: sid, mode: 'torchrun', launcher_pid: process.pid, launcher_create_time: created,
    command: ['rtdebug', 'torchrun'], cwd: '/w', script: '/w/train.py', nnodes: '1', nproc_per_node: N, node_rank: 0,
    host: '127.0.0.1', port_base: 20000, ports: [20000, 20000 + N - 1], started_at: now, updated_at: now, state: 'running',
  }), // prettier-ignore
);
const rankFile = (r, over = {}) =>
  fs.writeFileSync(
    path.join(sdir, `rank-${r}.json`),
    JSON.stringify({
      schema_version: 1, kind: 'rank', session_id: sid, rank: r, local_rank: r, node_rank: 0, world_size: N, host: '127.0.0.1',
      port: 20000 + r, pid: process.pid, create_time: created, state: 'ready', lazy: false, wait: false, attach_count: 0,
      script: '/w/train.py', cwd: '/w', started_at: now, updated_at: now,
      meshes: [{ dims: ['dp', 'tp'], shape: [N / TP, TP], coord: [Math.floor(r / TP), r % TP], groups: ['1', '2'], descs: ['mesh_dp', 'mesh_tp'] }],
      ...over,
    }), // prettier-ignore
  );
for (let r = 0; r < N; r++) rankFile(r);
process.env.RTDEBUG_REGISTRY_DIR = root;

const ms = (t0) => performance.now() - t0;
const fmt = (xs) => {
  const s = [...xs].sort((a, b) => a - b);
  return `median ${s[Math.floor(s.length / 2)].toFixed(1)} ms, max ${s[s.length - 1].toFixed(1)} ms`;
};

/** What VS Code asks for a node it shows: its item, and its children's when it is expanded (recursively). */
function show(view, node, expanded) {
  let items = 0;
  const walk = (n) => {
    const item = view.getTreeItem(n);
    items++;
    if (item.collapsibleState === 2 || expanded.has(item.id)) for (const c of view.getChildren(n)) walk(c);
  };
  if (node === undefined) for (const c of view.getChildren()) walk(c);
  else walk(node);
  return items;
}

function bench(groupBy, expanded) {
  const watcher = new RegistryWatcher(() => {}, 1e9);
  const states = new RankDebugStates();
  const view = new RanksView(watcher, states, new AttachService(async () => ({})), undefined);
  view.groupBy = groupBy;
  let fired = [];
  view.onDidChangeTreeData((e) => fired.push(e));
  // first render: the registry read, the rows, and every item VS Code shows
  const out = {};
  {
    const t0 = performance.now();
    watcher.refresh();
    view.render();
    out.items = show(view, undefined, expanded);
    out.first = ms(t0);
  }
  // the once-a-second poll when nothing changed
  const idle = [];
  for (let i = 0; i < REPEAT; i++) {
    const t0 = performance.now();
    watcher.refresh();
    idle.push(ms(t0));
  }
  // one rank's registry entry changes: its state (another client attached, then detached), or --stop-on holds it
  // (which the session row also says: its subtree is refreshed); the poll, the rows, what the view fires, and
  // what VS Code then asks again
  const entryChange = (over) => {
    const times = [];
    let most = 0;
    for (let i = 0; i < REPEAT; i++) {
      rankFile(517, i % 2 ? {} : over);
      const t0 = performance.now();
      watcher.refresh();
      fired = [];
      view.render();
      let items = 0;
      for (const e of fired) for (const n of e === undefined ? [undefined] : [].concat(e)) items += show(view, n, expanded);
      times.push(ms(t0));
      most = Math.max(most, items);
    }
    rankFile(517); // as it was, for what comes next
    watcher.refresh();
    view.render();
    return { times: fmt(times), items: most };
  };
  out.state = entryChange({ state: 'attached', attach_count: 1 });
  out.stop = entryChange({ stop: { kind: 'nonfinite', reason: 'non-finite loss at step 5 (origin)', origin: true, step: 5 } });
  // one attached rank stops in the debugger (a DAP stopped event): the rows, what is fired, what VS Code re-asks
  const dap = [];
  for (let i = 0; i < REPEAT; i++) {
    const k = { session: sid, rank: 300 };
    const t0 = performance.now();
    if (i % 2) states.delete(k);
    else states.set(k, { state: 'stopped', reason: 'breakpoint', threadId: 1, stoppedAt: Date.now() });
    fired = [];
    view.render();
    for (const e of fired) for (const n of e === undefined ? [undefined] : [].concat(e)) show(view, n, expanded);
    dap.push(ms(t0));
  }
  view.dispose();
  watcher.dispose();
  return { ...out, idle: fmt(idle), dap: fmt(dap) };
}

const node = process.version;
console.log(
  `Ranks view, ${N} ranks (dp=${N / TP} × tp=${TP}), ${os.cpus().length} CPUs (${os.cpus()[0].model}), node ${node}, load ${os.loadavg()[0].toFixed(1)}`,
);
for (const [name, groupBy, expanded] of [
  ['grouped by dp (default), groups collapsed', 'auto', new Set()],
  [
    "grouped by dp, the changed rank's group expanded",
    'auto',
    new Set([`group:${sid}/dp=${Math.floor(517 / TP)}`, `group:${sid}/dp=${Math.floor(300 / TP)}`]),
  ],
  ['grouped by tp (8 groups of 128), all expanded', 'tp', new Set(Array.from({ length: TP }, (_, v) => `group:${sid}/tp=${v}`))],
  ['flat list (none)', 'none', new Set()],
]) {
  const b = bench(groupBy, expanded);
  console.log(`- ${name}:`);
  console.log(`    first render (registry read + rows + ${b.items} items): ${b.first.toFixed(1)} ms`);
  console.log(`    registry poll, nothing changed: ${b.idle}`);
  console.log(`    one rank's state changes in its entry (poll + rows + ${b.state.items} item(s) re-asked): ${b.state.times}`);
  console.log(`    --stop-on holds one rank (poll + rows + ${b.stop.items} items re-asked; the session row says it too): ${b.stop.times}`);
  console.log(`    one attached rank stops (rows + items re-asked): ${b.dap}`);
}
// The same registry listed by the harness (`rtdebug ps --json`, a Python process per read): what a poll through
// the CLI alone would cost. Needs the harness's interpreter (RTDEBUG_PYTHON, default ../.venv/bin/python).
const py = process.env.RTDEBUG_PYTHON ?? path.join(__dirname, '..', '..', '.venv', 'bin', 'python');
if (fs.existsSync(py)) {
  const { spawnSync } = require('child_process');
  const times = [];
  let listed = 0;
  for (let i = 0; i < REPEAT; i++) {
    const t0 = performance.now();
    const r = spawnSync(py, ['-m', 'rtdebug', 'ps', '--json'], {
      cwd: os.tmpdir(),
      env: process.env,
      encoding: 'utf8',
      maxBuffer: 64 << 20,
    });
    times.push(ms(t0));
    listed = (JSON.parse(r.stdout).sessions[0]?.ranks ?? []).length;
  }
  console.log(`- rtdebug ps --json of the same registry (${listed} ranks listed), process start included: ${fmt(times)}`);
} else console.log(`- rtdebug ps --json: not measured (no interpreter at ${py}; set RTDEBUG_PYTHON)`);
if (!process.env.BENCH_KEEP) fs.rmSync(root, { recursive: true, force: true });
else console.log(root);
