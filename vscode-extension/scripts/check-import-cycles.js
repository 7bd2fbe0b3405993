#!/usr/bin/env node
/**
 * Lint step: no import circles among the extension's own modules (a rule of the extension's layout, kept by
 * this step and by test/unit/importCycles.test.ts). A circle makes one module's top-level code run against
 * another's half-initialised exports, and ties modules that should be layered (common/ is pure and below
 * the VS Code glue) into one knot.
 *
 * Reads every .ts under the given folders (default src/ and test/) with TypeScript's own import scanner
 * (ts.preProcessFile: `import … from`, `import type`, `export … from`, `require()`), resolves the relative
 * specifiers to files, and reports each strongly connected component (Tarjan) with one of its cycles.
 * Type-only imports count too: they are erased at run time, but a type circle is the same knot.
 *
 * The feature folders of src/ are layered as well, and checked the same way over the folder graph (an
 * import from src/a/x.ts of src/b/y.ts is an edge a → b): today common ← registry ← stacks ← attach ←
 * ranks ← collectives, and configs ← attach; extension.ts and init.ts (src/ itself) sit on top and are
 * left out. Files may import across folders only downwards, so no two features depend on each other. The
 * lint runs it a second time with `--layers src/attach`: attach's own features (rank, launch, group,
 * allstop, adopt) are layered the same way.
 * Exit 1 with the cycles listed, 0 with none.
 */
const fs = require('fs');
const path = require('path');
const ts = require('typescript');

const ROOT = path.resolve(__dirname, '..');
// usage: check-import-cycles.js [--layers DIR] [DIR...]: DIRs to read (default src test); --layers: whose
// subfolders are the layered features (default src)
const args = process.argv.slice(2);
const at = args.indexOf('--layers');
const layersRoot = at >= 0 ? path.resolve(ROOT, args.splice(at, 2)[1]) : path.join(ROOT, 'src');
const dirs = args.length ? args : ['src', 'test'];

function files(dir) {
  const out = [];
  for (const e of fs.readdirSync(dir, { withFileTypes: true })) {
    const p = path.join(dir, e.name);
    if (e.isDirectory()) out.push(...files(p));
    else if (/\.ts$/.test(e.name) && !/\.d\.ts$/.test(e.name)) out.push(p);
  }
  return out;
}

function resolve(from, spec) {
  if (!spec.startsWith('.')) return undefined; // a package, not ours
  const base = path.resolve(path.dirname(from), spec);
  for (const c of [base, `${base}.ts`, path.join(base, 'index.ts')]) {
    if (fs.existsSync(c) && fs.statSync(c).isFile()) return c;
  }
  return undefined;
}

const graph = new Map();
for (const f of dirs.flatMap((d) => files(path.resolve(ROOT, d)))) {
  const info = ts.preProcessFile(fs.readFileSync(f, 'utf8'), true, true);
  graph.set(f, [...new Set(info.importedFiles.map((i) => resolve(f, i.fileName)).filter(Boolean))]);
}

// Tarjan's strongly connected components (iterative enough for a few hundred modules: recursion is fine)
let index = 0;
const idx = new Map(),
  low = new Map(),
  onStack = new Set(),
  stack = [],
  sccs = [];
function visit(v) {
  idx.set(v, index);
  low.set(v, index);
  index++;
  stack.push(v);
  onStack.add(v);
  for (const w of graph.get(v) ?? []) {
    if (!graph.has(w)) continue;
    if (!idx.has(w)) {
      visit(w);
      low.set(v, Math.min(low.get(v), low.get(w)));
    } else if (onStack.has(w)) low.set(v, Math.min(low.get(v), idx.get(w)));
  }
  if (low.get(v) === idx.get(v)) {
    const scc = [];
    let w;
    do {
      w = stack.pop();
      onStack.delete(w);
      scc.push(w);
    } while (w !== v);
    if (scc.length > 1 || (graph.get(v) ?? []).includes(v)) sccs.push(scc);
  }
}
for (const v of graph.keys()) if (!idx.has(v)) visit(v);

/** One concrete cycle through `start` inside its component (breadth-first back to it). */
function cycleThrough(start, members) {
  const prev = new Map([[start, null]]);
  const queue = [start];
  while (queue.length) {
    const v = queue.shift();
    for (const w of graph.get(v) ?? []) {
      if (w === start) {
        const out = [v];
        for (let p = prev.get(v); p; p = prev.get(p)) out.unshift(p);
        return [...out, start];
      }
      if (members.has(w) && !prev.has(w)) {
        prev.set(w, v);
        queue.push(w);
      }
    }
  }
  return [start];
}

const rel = (f) => path.relative(ROOT, f);
const problems = [];
for (const scc of sccs) {
  const members = new Set(scc);
  const start = [...scc].sort()[0];
  problems.push(`import cycle among ${scc.length} modules: ${scc.map(rel).sort().join(', ')}`);
  problems.push(`  e.g. ${cycleThrough(start, members).map(rel).join(' → ')}`);
}

// The folder graph of src/: feature folder → the folders it imports from (src/ itself left out).
const folderOf = (f) => {
  const parts = path.relative(layersRoot, f).split(path.sep);
  return parts.length > 1 && parts[0] !== '..' ? parts[0] : undefined;
};
const folders = new Map();
const why = new Map();
for (const [f, deps] of graph) {
  const a = folderOf(f);
  if (!a) continue;
  for (const d of deps) {
    const b = folderOf(d);
    if (!b || b === a) continue;
    if (!folders.has(a)) folders.set(a, new Set());
    folders.get(a).add(b);
    if (!why.has(`${a}→${b}`)) why.set(`${a}→${b}`, `${rel(f)} imports ${rel(d)}`);
  }
}
/** One folder cycle (depth-first, folders visited in name order so the report is stable), or undefined. */
function folderCycle() {
  const state = new Map();
  const trail = [];
  const dfs = (a) => {
    state.set(a, 'open');
    trail.push(a);
    for (const b of [...(folders.get(a) ?? [])].sort()) {
      if (state.get(b) === 'open') return [...trail.slice(trail.indexOf(b)), b];
      if (!state.has(b)) {
        const c = dfs(b);
        if (c) return c;
      }
    }
    trail.pop();
    state.set(a, 'done');
    return undefined;
  };
  for (const a of [...folders.keys()].sort())
    if (!state.has(a)) {
      const c = dfs(a);
      if (c) return c;
    }
  return undefined;
}
const fc = folderCycle();
if (fc) {
  problems.push(`folder cycle in ${rel(layersRoot)}/: ${fc.join(' → ')}`);
  for (let i = 0; i + 1 < fc.length; i++) problems.push(`  ${why.get(`${fc[i]}→${fc[i + 1]}`)}`);
}

if (!problems.length) {
  console.log(`import cycles: none in ${dirs.join(', ')} (${graph.size} modules; ${rel(layersRoot)}/ folders layered)`);
  process.exit(0);
}
for (const line of problems) console.error(line);
console.error(
  'FAIL: import cycle(s); import only downwards (see the layers above scripts/check-import-cycles.js) or move the shared part down',
);
process.exit(1);
