import * as assert from 'assert';
import * as fs from 'fs';
import * as path from 'path';
import { test } from 'node:test';
import Ajv2020 from 'ajv/dist/2020';
import { parseSessionEntry } from '../../src/registry/registryModel';
import { FIXTURES, SCHEMA_PATH } from './helpers';
import { jobArgs } from '../../src/attach/launch/jobProcess';
import {
  captureEnd,
  parseCapsuleInfo,
  rankPicks,
  rankProblem,
  replayConfiguration,
  replayOptions,
  scriptNote,
} from '../../src/attach/launch/replayModel';

// what `rtdebug capsule DIR --json` prints (harness/rtdebug/commands/capsule.py), two ranks of a 4-rank job
const SUMMARY = {
  dir: '/caps/c1',
  format: 1,
  world_size: 4,
  script: '/job/train.py',
  module: false,
  argv: ['--lr', '1'],
  ranks: [
    { rank: 1, collectives: 57, groups: 1, bytes: 4096, complete_upto: 57, closed: true, end_reason: 'ended' },
    {
      rank: 3,
      collectives: 40,
      groups: 2,
      bytes: 2048,
      complete_upto: 31,
      closed: true,
      end_reason: 'capture-max-gb reached before collective #32',
    },
  ],
  script_today: { path: '/job/train.py', state: 'differs', sha256: 'ab' },
  missing_ranks: [0, 2],
};

test('parseCapsuleInfo reads the harness summary and says where each capture ends', () => {
  const info = parseCapsuleInfo(JSON.stringify(SUMMARY));
  assert.strictEqual(info.worldSize, 4);
  assert.deepStrictEqual(
    info.ranks.map((r) => [r.rank, captureEnd(r)]),
    [
      [1, 'complete (#1-#57)'],
      [3, 'closed after #31: capture-max-gb reached before collective #32'],
    ],
  );
  assert.strictEqual(captureEnd({ rank: 0, collectives: 9, bytes: 0, completeUpto: 9, endReason: '' }), 'open: up to #9');
  assert.deepStrictEqual(
    rankPicks(info).map((p) => [p.label, p.rank, p.description]),
    [
      ['rank 1', 1, '57 collectives · complete (#1-#57)'],
      ['rank 3', 3, '40 collectives · closed after #31: capture-max-gb reached before collective #32'],
    ],
  );
});

test('parseCapsuleInfo refuses what is not a summary, and drops rows that are not ranks', () => {
  assert.throws(() => parseCapsuleInfo('rtdebug: error: x'), /not JSON/);
  assert.throws(() => parseCapsuleInfo('[]'), /not a capsule summary/);
  assert.throws(() => parseCapsuleInfo(JSON.stringify({ ...SUMMARY, world_size: 0 })), /not a capsule summary/);
  const odd = { ...SUMMARY, ranks: [{ rank: 9 }, { rank: -1 }, 'junk', null, { rank: 2.5 }, { rank: 0 }] };
  assert.deepStrictEqual(
    parseCapsuleInfo(JSON.stringify(odd)).ranks.map((r) => r.rank),
    [0],
  );
});

test('rankProblem: out of range, not captured, not a number; a captured rank passes', () => {
  const info = parseCapsuleInfo(JSON.stringify(SUMMARY));
  assert.strictEqual(rankProblem(info, 1), undefined);
  assert.strictEqual(rankProblem(info, '3'), undefined);
  assert.strictEqual(rankProblem(info, 4), 'rank 4 is out of range: the job had ranks 0-3.');
  assert.strictEqual(rankProblem(info, 2), 'rank 2 was not captured: the capsule holds ranks 1,3.');
  assert.strictEqual(rankProblem(info, 'one'), '"rank": one is not a rank number.');
  assert.strictEqual(rankProblem(info, undefined), '"rank": undefined is not a rank number.');
  assert.match(scriptNote(info) ?? '', /is not the captured script/);
  assert.strictEqual(scriptNote({ ...info, scriptState: 'same' }), undefined);
});

test('a replay configuration becomes `rtdebug replay DIR --rank R` with its options', () => {
  const c: Record<string, unknown> = { ...replayConfiguration('/caps/c1', 3), stopAtCollective: 12, checkTolerance: 0.001 };
  c.script = '/here/train.py';
  assert.strictEqual(c.mode, 'replay');
  const spec = {
    python: 'py',
    module: 'rtdebug',
    mode: 'replay' as const,
    script: '',
    args: [],
    cwd: '/w',
    env: {},
    portBase: 6000,
    host: '127.0.0.1',
    wait: 'all',
    replay: replayOptions(c),
  };
  assert.deepStrictEqual(jobArgs(spec), [
    '-m', 'rtdebug', 'replay', '/caps/c1', '--rank', '3', '--port', '6000', '--host', '127.0.0.1', '--wait',
    '--script', '/here/train.py', '--stop-at-collective', '12', '--check-tolerance', '0.001',
  ]); // prettier-ignore
  const plain = jobArgs({ ...spec, wait: 'none', replay: replayOptions({ capsule: '/c', rank: '0', noCheck: true }) });
  assert.deepStrictEqual(plain, ['-m', 'rtdebug', 'replay', '/c', '--rank', '0', '--port', '6000', '--host', '127.0.0.1', '--no-check']);
  assert.throws(() => jobArgs({ ...spec, replay: undefined }), /needs a capsule and a rank/);
});

test('a replay session entry (mode replay, its replay field) is one the schema and the parser take', () => {
  const schema = JSON.parse(fs.readFileSync(SCHEMA_PATH, 'utf8'));
  const compiled = new Ajv2020({ strict: false }).compile(schema);
  const validate = (x: object): boolean => compiled(x) === true;
  const base = JSON.parse(fs.readFileSync(path.join(FIXTURES, 'registry', 's1', 'session.json'), 'utf8'));
  const entry = { ...base, mode: 'replay', replay: { capsule: '/caps/c1', rank: 1, world_size: 2, scratch: '/caps/c1/scratch/rank-1' } };
  assert.ok(validate(entry), JSON.stringify(compiled.errors));
  assert.deepStrictEqual(parseSessionEntry(JSON.stringify(entry)).replay, entry.replay);
  assert.equal(validate({ ...entry, replay: { capsule: '/caps/c1', world_size: 2, scratch: '/s' } }), false);
  assert.equal(validate({ ...entry, mode: 'replayed' }), false);
});
