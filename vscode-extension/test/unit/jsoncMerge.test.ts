import * as assert from 'assert';
import { test } from 'node:test';
import * as jsonc from 'jsonc-parser';
import { applyGenerated, EMPTY_LAUNCH, GeneratedConfigs } from '../../src/configs/launchFiles';
import { JsoncSyntaxError, mergeNamedEntries, detectFormatting } from '../../src/configs/jsoncMerge';

const USER_LAUNCH = `{
  // my own comment, keep me
  "version": "0.2.0",
  "configurations": [
    /* a block comment before my config */
    {
      "name": "My app",   // trailing comment
      "type": "debugpy",
      "request": "launch",
      "program": "\${file}",
    },
    {
      "name": "rtdebug: attach rank 5",
      "type": "debugpy", "request": "attach", "connect": { "host": "127.0.0.1", "port": 5683 }
    }
  ]
}
`;

const gen = (ranks: number, script = 'train.py'): GeneratedConfigs => ({
  configurations: Array.from({ length: ranks }, (_, r) => ({
    name: `rtdebug: attach rank ${r}`,
    type: 'debugpy',
    request: 'attach',
    connect: { host: '127.0.0.1', port: 5678 + r },
  })),
  compounds: [
    {
      name: `rtdebug: all ranks (${script})`,
      configurations: Array.from({ length: ranks }, (_, r) => `rtdebug: attach rank ${r}`),
      preLaunchTask: `rtdebug: torchrun ${script}`,
    },
  ],
  tasks: [
    {
      label: `rtdebug: torchrun ${script}`,
      type: 'process',
      command: 'python',
      args: ['-m', 'rtdebug', 'torchrun', script],
      isBackground: true,
    },
  ],
  inputs: [{ id: 'rtdebugRank', type: 'promptString', description: 'Rank', default: '0' }],
});

test('merge keeps the user comments and entries byte for byte', () => {
  const { launch } = applyGenerated(USER_LAUNCH, '', gen(2), 'train.py');
  for (const kept of [
    '// my own comment, keep me',
    '/* a block comment before my config */',
    '"name": "My app",   // trailing comment',
    '"program": "${file}",',
  ]) {
    assert.ok(launch.includes(kept), `lost: ${kept}`);
  }
  const userBlock = USER_LAUNCH.slice(USER_LAUNCH.indexOf('/* a block'), USER_LAUNCH.indexOf('},') + 2);
  assert.ok(launch.includes(userBlock), 'user config block changed');
  const parsed = jsonc.parse(launch);
  assert.deepEqual(
    parsed.configurations.map((c: { name: string }) => c.name),
    ['My app', 'rtdebug: attach rank 0', 'rtdebug: attach rank 1'],
  );
  assert.equal(parsed.compounds.length, 1);
  assert.equal(parsed.inputs[0].id, 'rtdebugRank');
});

test('merge is idempotent', () => {
  const once = applyGenerated(USER_LAUNCH, '', gen(2), 'train.py');
  const twice = applyGenerated(once.launch, once.tasks, gen(2), 'train.py');
  assert.equal(twice.launch, once.launch);
  assert.equal(twice.tasks, once.tasks);
});

test('re-running with other options updates owned entries instead of duplicating', () => {
  const two = applyGenerated(USER_LAUNCH, '', gen(2), 'train.py');
  const three = applyGenerated(two.launch, two.tasks, gen(3), 'train.py');
  const parsed = jsonc.parse(three.launch);
  assert.deepEqual(
    parsed.configurations.map((c: { name: string }) => c.name),
    ['My app', 'rtdebug: attach rank 0', 'rtdebug: attach rank 1', 'rtdebug: attach rank 2'],
  );
  assert.equal(parsed.compounds[0].configurations.length, 3);
  const one = applyGenerated(three.launch, three.tasks, gen(1), 'train.py');
  assert.deepEqual(
    jsonc.parse(one.launch).configurations.map((c: { name: string }) => c.name),
    ['My app', 'rtdebug: attach rank 0'],
  );
  assert.ok(one.launch.includes('// my own comment, keep me'));
});

test('an owned entry the user edited is replaced in place, keeping its position', () => {
  const t = mergeNamedEntries('{"tasks": [{"label": "rtdebug: t", "command": "old"}, {"label": "mine"}]}', {
    key: 'tasks',
    nameKey: 'label',
    entries: [{ label: 'rtdebug: t', command: 'new' }],
    owned: (n) => n.startsWith('rtdebug: '),
  });
  assert.deepEqual(jsonc.parse(t).tasks, [{ label: 'rtdebug: t', command: 'new' }, { label: 'mine' }]);
});

test('missing files are created with a version field', () => {
  const out = applyGenerated('', '', gen(1), 'train.py');
  assert.equal(jsonc.parse(out.launch).version, '0.2.0');
  assert.equal(jsonc.parse(out.tasks).version, '2.0.0');
  assert.equal(jsonc.parse(out.tasks).tasks[0].label, 'rtdebug: torchrun train.py');
});

test('no tasks and no tasks.json: tasks.json stays absent', () => {
  const out = applyGenerated(
    EMPTY_LAUNCH,
    '',
    { configurations: [{ name: 'rtdebug: x', type: 'debugpy' }], compounds: [], tasks: [], inputs: [] },
    'x.py',
  );
  assert.equal(out.tasks, '');
  assert.equal(jsonc.parse(out.launch).compounds, undefined);
});

test('a launch.json with a syntax error is refused, not overwritten', () => {
  assert.throws(() => applyGenerated('{ "configurations": [ { "name": } ] }', '', gen(1), 'train.py'), JsoncSyntaxError);
  assert.throws(() => applyGenerated('{ "configurations": {} }', '', gen(1), 'train.py'), /not an array/);
});

test('formatting follows the file: tabs or spaces', () => {
  assert.equal(detectFormatting('{\n\t"a": 1\n}').insertSpaces, false);
  assert.deepEqual(detectFormatting('{\n  "a": 1\n}'), { insertSpaces: true, tabSize: 2, eol: '\n' });
  const out = applyGenerated(USER_LAUNCH, '', gen(1), 'train.py').launch;
  assert.ok(out.includes('\n    {\n      "name": "rtdebug: attach rank 0"'), out);
});

test('generating for a second script keeps the first one working', () => {
  const a = applyGenerated(USER_LAUNCH, '', gen(3, 'a.py'), 'a.py');
  const b = applyGenerated(a.launch, a.tasks, gen(2, 'b.py'), 'b.py');
  const launch = jsonc.parse(b.launch);
  assert.deepEqual(
    launch.compounds.map((c: { name: string }) => c.name),
    ['rtdebug: all ranks (a.py)', 'rtdebug: all ranks (b.py)'],
  );
  assert.ok(
    launch.configurations.some((c: { name: string }) => c.name === 'rtdebug: attach rank 2'),
    'a.py compound still lists rank 2',
  );
  assert.equal(
    launch.configurations.filter((c: { name: string }) => c.name === 'rtdebug: attach rank 5').length,
    0,
    'unreferenced stale rank config removed',
  );
  assert.deepEqual(
    jsonc.parse(b.tasks).tasks.map((t: { label: string }) => t.label),
    ['rtdebug: torchrun a.py', 'rtdebug: torchrun b.py'],
  );
  assert.deepEqual(applyGenerated(b.launch, b.tasks, gen(2, 'b.py'), 'b.py'), b, 'idempotent');
});

test('a single-process run keeps the shared per-rank configs', () => {
  const a = applyGenerated(EMPTY_LAUNCH, '', gen(2, 'a.py'), 'a.py');
  const withPicker = applyGenerated(
    a.launch,
    a.tasks,
    { ...gen(2, 'a.py'), configurations: [...gen(2, 'a.py').configurations, { name: 'rtdebug: attach to rank…', type: 'rtdebug' }] },
    'a.py',
  );
  const run = applyGenerated(
    withPicker.launch,
    withPicker.tasks,
    { configurations: [{ name: 'rtdebug: l.py (single process)', type: 'debugpy' }], compounds: [], tasks: [], inputs: [] },
    'l.py',
  );
  assert.deepEqual(
    jsonc.parse(run.launch).configurations.map((c: { name: string }) => c.name),
    ['rtdebug: attach rank 0', 'rtdebug: attach rank 1', 'rtdebug: attach to rank…', 'rtdebug: l.py (single process)'],
  );
});
