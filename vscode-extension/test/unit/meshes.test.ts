import * as assert from 'assert';
import * as fs from 'fs';
import * as path from 'path';
import { test } from 'node:test';
import Ajv2020 from 'ajv/dist/2020';
import { chooseRanks, SelectorError, selectorPreview, selectorPrompt } from '../../src/attach/rank/rankSelector';
import { checkWith } from '../../src/common/harnessCheck';
import { coordLabel, dimsOf, parseMeshes } from '../../src/registry/meshes';
import { linuxCreateTime } from '../../src/registry/processLiveness';
import { parseRankEntry, RankEntry } from '../../src/registry/registryModel';
import { FIXTURES, harnessPython, SCHEMA_PATH, tmpDir } from './helpers';
import { rankEntry, sessionOf } from './session';

/** Ranks by mesh coordinates (issue 31): the entries' meshes read as untrusted, and the selector the CLI checks (`rtdebug check --rank`). */
const mesh = (dims: string[], shape: number[], coord: number[], extra: Record<string, unknown> = {}) => ({ dims, shape, coord, ...extra });
/** A mesh as a forger could write it: any JSON. */
const raw = (dims: unknown, shape: unknown[], coord: unknown[]) => ({ dims, shape, coord });
/** A dp=2 × tp=2 job (rank = 2·dp + tp), with a flattened mesh as torchtitan makes one. */
function job(n = 4): RankEntry[] {
  return Array.from({ length: n }, (_, r) =>
    rankEntry(r, 'ready', {
      world_size: n,
      meshes: [
        mesh(['dp', 'tp'], [2, 2], [r >> 1, r & 1], { groups: ['g1', 'g2'], descs: ['mesh_dp', 'mesh_tp'] }),
        mesh(['dp_tp'], [4], [r]),
      ],
    }),
  );
}

test("meshes validate against the registry schema and are read back as the rank's coordinates", () => {
  const schema = JSON.parse(fs.readFileSync(SCHEMA_PATH, 'utf8'));
  const validate = new Ajv2020({ strict: false }).compile(schema);
  const base = JSON.parse(fs.readFileSync(path.join(FIXTURES, 'registry', 's1', 'rank-0.json'), 'utf8'));
  const raw = { ...base, meshes: [mesh(['dp', 'tp'], [2, 2], [0, 1], { groups: ['1', '2'], descs: ['mesh_dp', 'mesh_tp'] })] };
  assert.ok(validate(raw), JSON.stringify(validate.errors));
  const r = parseRankEntry(JSON.stringify(raw));
  assert.deepEqual(r.meshes, [{ dims: ['dp', 'tp'], shape: [2, 2], coord: [0, 1], groups: ['1', '2'], descs: ['mesh_dp', 'mesh_tp'] }]);
  assert.equal(coordLabel(r), 'dp=0, tp=1');
  assert.deepEqual(parseRankEntry(JSON.stringify(base)).meshes, []);
  assert.deepEqual(
    [...dimsOf(job())],
    [
      ['dp', 2],
      ['tp', 2],
      ['dp_tp', 4],
    ],
  );
});

test('forged meshes are not coordinates: names, integers, coord < shape, at most 8 dims, at most 16 meshes', () => {
  const bad = [
    mesh(['d p'], [2], [0]),
    mesh(['1dp'], [2], [0]),
    mesh(['dp'], [2], [2]),
    mesh(['dp'], [2], [-1]),
    mesh(['dp'], [2], [0.5]),
    raw(['dp'], [true], [0]),
    raw(['dp'], ['2'], [0]),
    mesh(['dp', 'tp'], [2], [0]),
    mesh(['dp'], [1 << 20], [0]),
    mesh(
      Array.from({ length: 9 }, (_, i) => `d${i}`),
      Array(9).fill(2),
      Array(9).fill(0),
    ),
    { dims: 'dp', shape: [2], coord: [0] },
    null,
    'mesh',
  ];
  assert.deepEqual(parseMeshes(bad), []);
  assert.deepEqual(parseMeshes('junk'), []);
  const many = Array.from({ length: 20 }, (_, i) => mesh([`d${i}`], [2], [1]));
  assert.equal(parseMeshes(many).length, 16);
  const eight = mesh(
    Array.from({ length: 8 }, (_, i) => `d${i}`),
    Array(8).fill(2),
    Array(8).fill(1),
  );
  assert.equal(parseMeshes([eight]).length, 1);
  // odd groups/descs are dropped, the mesh kept
  assert.deepEqual(parseMeshes([mesh(['dp'], [2], [1], { groups: [1], descs: ['a', 'b'] })]), [
    { dims: ['dp'], shape: [2], coord: [1], groups: undefined, descs: undefined },
  ]);
});

/**
 * Attach to Ranks… asks the CLI (`rtdebug check --rank SEL --session ID --json`): a real registry of this node
 * (entries of this live process, as the harness's liveness check wants them), the real harness.
 */
function liveRegistry(ranks: RankEntry[]): string {
  const dir = tmpDir();
  const sdir = path.join(dir, 's1');
  fs.mkdirSync(sdir, { mode: 0o700 });
  const created = linuxCreateTime(process.pid) ?? 1;
  const s = sessionOf(ranks).entry;
  const live = { pid: process.pid, create_time: created, started_at: Date.now() / 1000 };
  fs.writeFileSync(
    path.join(sdir, 'session.json'),
    JSON.stringify({ ...s, nproc_per_node: ranks.length, launcher_pid: process.pid, launcher_create_time: created }),
  );
  for (const r of ranks) fs.writeFileSync(path.join(sdir, `rank-${r.rank}.json`), JSON.stringify({ ...r, ...live }));
  return dir;
}

const py = harnessPython();

test(
  'Attach to Ranks…: rank lists as before, or coordinates, chosen and refused by the CLI in its words',
  { skip: !py && 'no harness venv' },
  async () => {
    const dir = liveRegistry(job().map((r) => ({ ...r, meshes: r.meshes!.slice(0, 1) })));
    const run = checkWith({ python: py!, module: 'rtdebug', env: { ...process.env, RTDEBUG_REGISTRY_DIR: dir } });
    assert.deepEqual(await chooseRanks(run, '0,2-3', 's1'), [0, 2, 3]);
    assert.deepEqual(await chooseRanks(run, ' tp=1 ', 's1'), [1, 3]);
    assert.deepEqual(await chooseRanks(run, 'all', 's1'), [0, 1, 2, 3]);
    assert.deepEqual(await chooseRanks(run, 'dp = ( 1 ) , tp = 0', 's1'), [2]);
    const ERR: Record<string, string> = {
      'pp=0': "--rank pp=0: unknown mesh dimension 'pp'; the dimensions are dp (0-1), tp (0-1)",
      'tp=2': '--rank tp=2: tp=2 is out of range; tp is 0-1',
      'dp=(0,5)': '--rank dp=(0,5): dp=5 is out of range; dp is 0-1',
      'dp=0,tp=x': "--rank 'dp=0,tp=x': 'tp=x' is not DIM=N, DIM=*, DIM=A:B or DIM=(A,B,...)",
      'dp=1:0': '--rank dp=1:0 selects no rank',
      '0,7': 'rank 7 is out of range: session s1 has world size 4',
      x: "--rank 'x': a rank list such as 0,2-3 or mesh coordinates such as tp=1 or dp=0,tp=*",
      é: "--rank 'é': a rank list such as 0,2-3 or mesh coordinates such as tp=1 or dp=0,tp=*",
    };
    for (const [t, line] of Object.entries(ERR)) {
      await assert.rejects(
        chooseRanks(run, t, 's1'),
        (e: Error) => (assert.ok(e instanceof SelectorError), assert.equal(e.message, line), true),
      );
    }
    assert.deepEqual(await selectorPreview(run, 'tp=0', 's1'), { ok: true, message: 'ranks 0,2 (2 of 4)' });
    assert.deepEqual(await selectorPreview(run, 'tp=2', 's1'), { ok: false, message: '--rank tp=2: tp=2 is out of range; tp is 0-1' });
    assert.match(await selectorPrompt(run, 's1'), /dimensions: dp \(0-1\), tp \(0-1\)$/);
    // a session that is gone: the CLI's runtime error, not a verdict on the selector
    await assert.rejects(chooseRanks(run, '0', 'gone'), /no live session 'gone'; see `rtdebug ps`/);
    fs.rmSync(dir, { recursive: true, force: true });
  },
);

test('forged mesh entries never define the coordinates the CLI resolves', { skip: !py && 'no harness venv' }, async () => {
  const ranks = [
    ...job().slice(0, 2),
    rankEntry(2, 'ready', { world_size: 4, meshes: [mesh(['dp', 'tp'], [2, 2], [1, 0]), mesh(['d p'], [4], [3])] }),
  ];
  const dir = liveRegistry(ranks);
  const run = checkWith({ python: py!, module: 'rtdebug', env: { ...process.env, RTDEBUG_REGISTRY_DIR: dir } });
  await assert.rejects(
    chooseRanks(run, 'pp=3', 's1'),
    /unknown mesh dimension 'pp'; the dimensions are dp \(0-1\), tp \(0-1\), dp_tp \(0-3\)$/,
  );
  assert.deepEqual(await chooseRanks(run, 'dp=1', 's1'), [2]);
  fs.rmSync(dir, { recursive: true, force: true });
});
