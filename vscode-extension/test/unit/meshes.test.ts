import * as assert from 'assert';
import * as fs from 'fs';
import * as path from 'path';
import { test } from 'node:test';
import Ajv2020 from 'ajv/dist/2020';
import { chooseRanks, selectorPreview, selectorPrompt } from '../../src/attach/rankSelector';
import { coordLabel, dimsOf, parseMeshes, resolveSelector } from '../../src/registry/meshes';
import { parseRankEntry, RankEntry } from '../../src/registry/registryModel';
import { FIXTURES, SCHEMA_PATH } from './helpers';
import { rankEntry, sessionOf } from './session';

/** Ranks by mesh coordinates (issue 31): the entries' meshes read as untrusted, and the selector grammar and words of harness/rtdebug/common/selector.py. */
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

test('selectors resolve as the CLI resolves them', () => {
  const ranks = job();
  const sel = (t: string) => resolveSelector(t, ranks);
  assert.deepEqual(sel('tp=0'), [0, 2]);
  assert.deepEqual(sel('dp=0,tp=*'), [0, 1]);
  assert.deepEqual(sel('dp_tp=1:3'), [1, 2]);
  assert.deepEqual(sel('dp=(0,1),tp=1'), [1, 3]);
  assert.deepEqual(sel('dp = ( 1 ) , tp = 0'), [2]);
  assert.deepEqual(sel('dp=1:0'), [], 'an empty slice chooses nothing (the CLI then says so)');
  assert.deepEqual(
    [...dimsOf(ranks)],
    [
      ['dp', 2],
      ['tp', 2],
      ['dp_tp', 4],
    ],
  );
});

test('an unknown dimension or an out-of-range coordinate is one line listing the valid ones, in the CLI words', () => {
  const ranks = job().map((r) => ({ ...r, meshes: r.meshes!.slice(0, 1) }));
  const err = (t: string) =>
    assert.throws(
      () => resolveSelector(t, ranks),
      (e: Error) => (assert.equal(e.message, ERR[t]), true),
    );
  const ERR: Record<string, string> = {
    'pp=0': "--rank pp=0: unknown mesh dimension 'pp'; the dimensions are dp (0-1), tp (0-1)",
    'tp=2': '--rank tp=2: tp=2 is out of range; tp is 0-1',
    'dp=(0,5)': '--rank dp=(0,5): dp=5 is out of range; dp is 0-1',
    'dp=0,tp=x': "--rank 'dp=0,tp=x': 'tp=x' is not DIM=N, DIM=*, DIM=A:B or DIM=(A,B,...)",
    'tp=': "--rank 'tp=': 'tp=' is not DIM=N, DIM=*, DIM=A:B or DIM=(A,B,...)",
  };
  for (const t of Object.keys(ERR)) err(t);
  assert.throws(
    () => resolveSelector('tp=0', [rankEntry(0, 'ready')]),
    /^Error: --rank tp=0: unknown mesh dimension 'tp'; the dimensions are none: the job has made no DeviceMesh yet$/,
  );
});

test('Attach to Ranks…: rank lists as before, or coordinates; unverified entries never define them', () => {
  const s = sessionOf(job());
  assert.deepEqual(chooseRanks('0,2-3', s), [0, 2, 3]);
  assert.deepEqual(chooseRanks(' tp=1 ', s), [1, 3]);
  assert.deepEqual(chooseRanks('all', s), [0, 1, 2, 3]);
  assert.throws(() => chooseRanks('dp=1:0', s), /^Error: --rank dp=1:0 selects no rank$/);
  assert.throws(() => chooseRanks('0,7', s), /^Error: rank 7 is out of range: session s1 has world size 4$/);
  assert.throws(() => chooseRanks('x', s), /^Error: --rank 'x': a rank list such as 0,2-3 or mesh coordinates such as tp=1 or dp=0,tp=\*$/);
  assert.throws(() => chooseRanks('', s), /selects no rank/);
  const forged = sessionOf([
    ...job().slice(0, 2),
    rankEntry(2, 'ready', { world_size: 4, verified: false, meshes: [mesh(['pp'], [4], [3])] }),
  ]);
  assert.throws(() => chooseRanks('pp=3', forged), /unknown mesh dimension 'pp'; the dimensions are dp \(0-1\), tp \(0-1\), dp_tp \(0-3\)/);
  assert.deepEqual(selectorPreview('tp=0', s), { ok: true, message: 'ranks 0,2 (2 of 4)' });
  assert.deepEqual(selectorPreview('tp=2', s), { ok: false, message: '--rank tp=2: tp=2 is out of range; tp is 0-1' });
  assert.match(selectorPrompt(s), /dimensions: dp \(0-1\), tp \(0-1\), dp_tp \(0-3\)$/);
});
