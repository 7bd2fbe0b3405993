import * as assert from 'assert';
import * as fs from 'fs';
import * as path from 'path';
import { test } from 'node:test';
import { compressRanks, departsAt, frameRows, groupRow, verdictRow } from '../../src/stacks/stacksModel';
import { parseStacks } from '../../src/stacks/stacksReport';
import { FIXTURES } from './helpers';

const fixture = fs.readFileSync(path.join(FIXTURES, 'stacks', 'hang.json'), 'utf8');

test('parseStacks: groups largest first, ranks sorted, unresponsive ranks', () => {
  const rep = parseStacks(fixture);
  assert.equal(rep.session_id, '20261203-080000-ab12');
  assert.deepEqual(
    rep.groups.map((g) => g.ranks),
    [[0, 2, 3], [1]],
  );
  assert.deepEqual(rep.unresponsive, [4]);
  assert.deepEqual(parseStacks('{"session_id":"s","groups":[],"unresponsive":[{"rank":2}]}').unresponsive, [2]);
  assert.throws(() => parseStacks('nope'), /printed no JSON/);
  assert.throws(() => parseStacks('{"groups":[{"ranks":[0]}]}'), /group 0 needs "ranks" and "frames"/);
});

test('compressRanks uses the harness rank-list syntax', () => {
  assert.equal(compressRanks([3, 0, 2, 4, 7]), '0,2-4,7');
  assert.equal(compressRanks([1]), '1');
});

test('group rows: who, innermost ← caller, file:line; the odd group says it differs', () => {
  const rep = parseStacks(fixture);
  const [maj, odd] = rep.groups;
  const a = groupRow(maj, maj);
  assert.equal(a.label, 'ranks 0,2-3: all_reduce ← train_step (distributed_c10d.py:2501)');
  assert.equal(a.representative, 0);
  const b = groupRow(odd, maj);
  assert.equal(b.label, 'rank 1: barrier ← evaluate (hang.py:31)');
  assert.match(b.description, /differs from the majority/);
  assert.match(b.accessibilityLabel, /^rank 1, 1 ranks, innermost barrier/);
});

test('frame rows open file:line; the frame where a group departs from the majority is marked', () => {
  const rep = parseStacks(fixture);
  const [maj, odd] = rep.groups;
  assert.equal(departsAt(odd, maj), 1);
  assert.equal(departsAt(maj, maj), undefined);
  const rows = frameRows(odd, maj);
  assert.deepEqual(
    rows.map((r) => [r.label, r.file, r.line, r.departs]),
    [
      ['barrier', '/work/proj/examples/hang.py', 31, false],
      ['evaluate', '/work/proj/examples/hang.py', 57, true],
      ['main', '/work/proj/examples/hang.py', 70, false],
    ],
  );
  assert.equal(rows[1].description, 'hang.py:57 · departs from the majority here');
});

test('a frame whose line the dump could not tell (null) is shown without one', () => {
  const rep = parseStacks(
    '{"session_id":"s","groups":[{"ranks":[0],"frames":[{"file":"/x/lib.py","line":null,"function":"wait"}]}],"unresponsive":[]}',
  );
  assert.equal(groupRow(rep.groups[0], rep.groups[0]).label, 'rank 0: wait (lib.py)');
  assert.equal(frameRows(rep.groups[0], rep.groups[0])[0].description, 'lib.py');
});

test('the verdict leads (contract C3) with a one-click attach to the culprit; group collectives are shown; forged ones dropped', () => {
  const v = {
    session_id: 's',
    verdict: 'rank 1 never entered ALLREDUCE #4 (hang.py:22): it is in barrier ← evaluate (hang.py:26)',
    culprit: 1,
    unresponsive: [],
    groups: [
      {
        ranks: [0],
        frames: [{ file: '/p/hang.py', line: 22, function: 'train_step' }],
        collectives: [{ rank: 0, op: 'ALLREDUCE', seq: 4, state: 'entered', file: '/p/hang.py', line: 22 }],
      },
      {
        ranks: [1],
        frames: [{ file: '/p/hang.py', line: 26, function: 'evaluate' }],
        collectives: [{ rank: 1, op: 'BARRIER', seq: 1, state: 'entered' }, { rank: -1, op: 'X', seq: 0 }, 'junk'],
      },
    ],
  };
  const rep = parseStacks(JSON.stringify(v));
  assert.equal(rep.culprit, 1);
  const row = verdictRow(rep)!;
  assert.equal(row.label, v.verdict);
  assert.equal(row.attachLabel, 'Attach to rank 1');
  assert.deepEqual(rep.groups[1].collectives, [{ rank: 1, op: 'BARRIER', seq: 1, state: 'entered', file: undefined, line: undefined }]);
  const g = groupRow(rep.groups[0], rep.groups[0]);
  assert.equal(g.description, '1 rank(s) · ALLREDUCE #4 entered');
  assert.match(g.tooltip, /collectives:\n {2}rank 0: ALLREDUCE #4 entered \(hang\.py:22\)$/);
  assert.equal(verdictRow(parseStacks(JSON.stringify({ ...v, verdict: null, culprit: null }))), undefined);
  const noCulprit = parseStacks(JSON.stringify({ ...v, culprit: 'rank 1' }));
  assert.equal(noCulprit.culprit, undefined);
  assert.equal(verdictRow(noCulprit)!.attachLabel, undefined);
  // a job seen moving: no verdict, its headline leads the view (not an error, nobody to attach to)
  const line = 'the job is progressing: every rank advanced (rank 0 by 312 collectives in 0.3 s); no hang. Where each rank is now:';
  const moving = parseStacks(JSON.stringify({ ...v, verdict: null, culprit: null, motion_line: line }));
  assert.deepEqual(verdictRow(moving), { label: line, tooltip: line, accessibilityLabel: `progress: ${line}`, progress: true });
  const still = verdictRow(
    parseStacks(JSON.stringify({ ...v, motion_line: "rank 1 is stopped in the debugger: the verdict is this instant's" })),
  )!;
  assert.equal(still.label, v.verdict);
  assert.match(still.tooltip, /^rank 1 is stopped in the debugger: the verdict is this instant's\n/);
});

test('a group whose innermost frame is library code names the user frame that called it (as `rtdebug stacks` prints)', () => {
  const rep = parseStacks(
    JSON.stringify({
      session_id: 's',
      unresponsive: [],
      groups: [
        {
          ranks: [0],
          frames: [
            { file: '/v/torch/distributed/distributed_c10d.py', line: 3252, function: 'all_reduce', kind: 'library' },
            { file: '/v/torch/distributed/c10d_logger.py', line: 83, function: 'wrapper', kind: 'library' },
            { file: '/p/hang.py', line: 22, function: 'train_step', kind: 'user' },
          ],
        },
      ],
    }),
  );
  assert.equal(groupRow(rep.groups[0], rep.groups[0]).label, 'rank 0: all_reduce ← train_step (hang.py:22)');
});
