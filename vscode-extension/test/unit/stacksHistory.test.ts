import * as assert from 'assert';
import * as fs from 'fs';
import * as path from 'path';
import { test } from 'node:test';
import { runHarness } from '../../src/common/harnessCli';
import { historyGroupItem, historyItem, historyRowItem, parseHistory, withoutLine } from '../../src/stacks/stacksHistory';
import { flightNoteRow, groupRow, stacksRoots, verdictRow } from '../../src/stacks/stacksModel';
import { parseStacks, takeStacks } from '../../src/stacks/stacksReport';
import { FIXTURES, tmpDir } from './helpers';

/**
 * The Rank Stacks view's verdict, Flight Recorder note, fallback marks and collective history, against two
 * answers of the real harness (`rtdebug stacks --json --history 16` on examples/uneven_ddp.py, 3 ranks,
 * gloo: rank 0 has one batch more and waits in DDP's gradient all-reduce while ranks 1-2 wait in the
 * barrier; then the same job with TORCH_FR_BUFFER_SIZE=0, the recorder off).
 */
const read = (name: string) => fs.readFileSync(path.join(FIXTURES, 'stacks', name), 'utf8');
const uneven = read('uneven_history.json');
const frOff = read('flight_off_history.json');

test('the uneven-DDP answer: verdict first, positions from the Flight Recorder, who issued the collective', () => {
  const rep = parseStacks(uneven);
  assert.match(
    rep.verdict!,
    /^rank 0 is in ALLREDUCE #12 \(uneven_ddp\.py:36\) issued by DDP during backward\(\), which ranks 1-2 never entered/,
  );
  assert.equal(rep.culprit, 0);
  assert.equal(rep.collectivesFrom, 'flight recorder');
  assert.equal(rep.flightNote, undefined);
  assert.equal(flightNoteRow(rep), undefined);
  assert.deepEqual(rep.fallback, []);
  assert.match(verdictRow(rep)!.tooltip, /\nCollective positions from torch's Flight Recorder\.\nAttach to rank 0 to see where it is\.$/);
  const [barrier, ddp] = rep.groups;
  assert.deepEqual([barrier.ranks, ddp.ranks], [[1, 2], [0]]);
  assert.deepEqual(ddp.collectives, [
    {
      rank: 0,
      op: 'ALLREDUCE',
      seq: 12,
      state: 'entered',
      file: '/work/main/examples/uneven_ddp.py',
      line: 36,
      pg: '0',
      issued: 'torch',
      by: 'DDP',
      during: 'backward()',
    },
  ]);
  const row = groupRow(ddp, barrier, rep.fallback, rep.collectivesFrom);
  assert.equal(row.description, '1 rank(s) · ALLREDUCE #12 entered by DDP · differs from the majority');
  assert.match(
    row.tooltip,
    /\ncollectives \(from torch's Flight Recorder\):\n {2}rank 0: ALLREDUCE #12 entered \(uneven_ddp\.py:36\) issued by DDP during backward\(\)$/,
  );
  assert.equal(groupRow(barrier, barrier, rep.fallback, rep.collectivesFrom).description, '2 rank(s) · BARRIER #12 entered');
});

test('collective history: one process group, a row per sequence number, the first divergence marked', () => {
  const h = parseStacks(uneven).history!;
  assert.deepEqual(h.without, []);
  assert.equal(h.groups.length, 1);
  const [g] = h.groups;
  assert.deepEqual(
    [g.pg, g.desc, g.firstDivergence, g.rows.map((r) => r.seq)],
    ['0', 'default_pg', 12, [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12]],
  );
  assert.deepEqual(historyItem(h), {
    label: 'Collective history',
    description: 'ranks part in group 0 (default_pg)',
    tooltip:
      "Each rank's last 16 collectives from torch's Flight Recorder, per process group, aligned by sequence number (* = inside it, not returned; - = not reached).",
    accessibilityLabel: 'collective history, ranks part in group 0 (default_pg)',
  });
  const gi = historyGroupItem(g);
  assert.deepEqual([gi.label, gi.description, gi.mark], ['group 0 (default_pg)', 'last 12 · first divergence at #12', true]);
  const first = historyRowItem(g, g.rows[0]);
  assert.deepEqual([first.label, first.description, first.mark], ['#1  all: ALLGATHER [[1]] Long', '', false]);
  const last = historyRowItem(g, g.rows[11]);
  assert.equal(last.label, '#12  ranks 1-2: BARRIER [] * · rank 0: ALLREDUCE [[577]] Float *');
  assert.equal(last.description, '← first divergence');
  assert.equal(last.mark, true);
  assert.equal(
    last.accessibilityLabel,
    'sequence 12, first divergence: ranks 1-2 BARRIER [] (inside it); rank 0 ALLREDUCE [[577]] Float (inside it)',
  );
  assert.equal(
    last.tooltip,
    'group 0 (default_pg), #12 (first divergence)\n  ranks 1-2: BARRIER [] *\n  rank 0: ALLREDUCE [[577]] Float *',
  );
});

test('Flight Recorder off: its note is the line after the verdict, the record decides, no history from those ranks', () => {
  const rep = parseStacks(frOff);
  const note =
    "torch's Flight Recorder is off in ranks 0-2 (disabled by TORCH_FR_BUFFER_SIZE=0): collectives issued from C++ (DDP, FSDP) are not seen; the verdict uses rtdebug's record of Python-level collectives";
  assert.equal(rep.flightNote, note);
  assert.equal(flightNoteRow(rep)!.label, note);
  assert.equal(flightNoteRow(rep)!.accessibilityLabel, `note: ${note}`);
  assert.equal(rep.collectivesFrom, 'record');
  assert.match(verdictRow(rep)!.tooltip, /\nCollective positions from rtdebug's record of Python-level collectives\./);
  assert.deepEqual(rep.history, { groups: [], without: [0, 1, 2] });
  assert.equal(withoutLine(rep.history!), 'no Flight Recorder history from ranks 0-2');
  assert.equal(historyItem(rep.history!).description, 'no Flight Recorder history');
  assert.equal(parseStacks(uneven).history && withoutLine(parseStacks(uneven).history!), undefined);
});

test('the view leads with the verdict, then the Flight Recorder note; the groups; the history last', () => {
  const kinds = (text: string) => stacksRoots(parseStacks(text)).map((r) => r.kind);
  assert.deepEqual(kinds(frOff), ['verdict', 'note', 'group', 'group', 'history']);
  assert.deepEqual(kinds(uneven), ['verdict', 'group', 'group', 'history']);
  assert.deepEqual(kinds(read('hang.json')), ['group', 'group', 'unresponsive'], 'an older harness: no verdict, note or history');
  const noVerdict = JSON.parse(frOff);
  noVerdict.verdict = null;
  assert.deepEqual(
    stacksRoots(parseStacks(JSON.stringify(noVerdict))).map((r) => r.kind),
    ['note', 'group', 'group', 'history'],
  );
});

test('ranks whose stacks came from the signal-time fallback dump are marked on their group; junk entries dropped', () => {
  const v = JSON.parse(uneven);
  v.fallback = [
    { rank: 0, reason: 'no answer from its dump thread within 1.5 s' },
    { rank: -1, reason: 'x' },
    'junk',
    { reason: 'no rank' },
  ];
  const rep = parseStacks(JSON.stringify(v));
  assert.deepEqual(rep.fallback, [{ rank: 0, reason: 'no answer from its dump thread within 1.5 s' }]);
  const [barrier, ddp] = rep.groups;
  const row = groupRow(ddp, barrier, rep.fallback);
  assert.equal(row.fallback, true);
  assert.equal(
    row.description,
    '1 rank(s) · ALLREDUCE #12 entered by DDP · rank 0: signal-time dump (fallback) · differs from the majority',
  );
  assert.match(
    row.tooltip,
    /\nrank 0: signal-time dump \(fallback: no answer from its dump thread within 1\.5 s; a C call may hold its GIL\), read without the GIL$/,
  );
  assert.match(row.accessibilityLabel, /rank 0: signal-time dump \(fallback\)/);
  assert.equal(groupRow(barrier, barrier, rep.fallback).fallback, false);
});

test('a forged history is checked value by value: no rank that is not a number, no control characters, no stray divergence', () => {
  const h = parseHistory({
    without: [3, 'x', -1, 3],
    groups: [
      {
        pg: 7,
        desc: 'sub\u001b[2Jgroup',
        first_divergence: 99,
        rows: [
          {
            seq: 5,
            cells: { 0: 'ALLREDUCE [[4]] Float', 1: 'ALLREDUCE [[4]] Float\nrank 9: fake', x: 'BAD', 2: 7 },
            entered: [0, 'y'],
            differs: true,
          },
          { seq: -1, cells: {} },
          'junk',
          { seq: 6, cells: { 0: 'BROADCAST [[1]] Int', 1: '-' }, entered: [], differs: false },
        ],
      },
      { desc: 'no pg', rows: [] },
      null,
    ],
  })!;
  assert.deepEqual(h.without, [3]);
  assert.equal(h.groups.length, 1);
  const [g] = h.groups;
  assert.deepEqual([g.pg, g.desc, g.firstDivergence], ['7', 'sub?[2Jgroup', undefined]);
  assert.deepEqual(
    g.rows.map((r) => [r.seq, [...r.cells], r.entered]),
    [
      [
        5,
        [
          [0, 'ALLREDUCE [[4]] Float'],
          [1, 'ALLREDUCE [[4]] Float?rank 9: fake'],
        ],
        [0],
      ],
      [
        6,
        [
          [0, 'BROADCAST [[1]] Int'],
          [1, '-'],
        ],
        [],
      ],
    ],
  );
  assert.equal(historyRowItem(g, g.rows[1]).label, '#6  rank 0: BROADCAST [[1]] Int · rank 1: -');
  assert.equal(historyRowItem(g, g.rows[1]).accessibilityLabel, 'sequence 6: rank 0 BROADCAST [[1]] Int; rank 1 not reached');
  assert.equal(historyRowItem(g, g.rows[0]).description, 'differs');
  assert.equal(parseHistory(undefined), undefined);
  assert.equal(parseHistory({ groups: 'x' }), undefined);
});

/** A stand-in `python` for `-m rtdebug stacks`: logs its arguments; `old` answers --history as a harness from before it did. */
function fakeHarness(old: boolean, fixture: string): { python: string; calls: () => string[] } {
  const d = tmpDir();
  const log = path.join(d, 'calls');
  const python = path.join(d, 'python');
  const refuse = old
    ? 'case "$*" in *--history*) echo "usage: rtdebug [-h] COMMAND ..." >&2; echo "rtdebug: error: unrecognized arguments: --history 16" >&2; exit 2;; esac\n'
    : '';
  fs.writeFileSync(
    python,
    `#!/bin/sh\n[ "$1" = -m ] || exit 1\necho "$*" >> ${log}\n${refuse}cat ${path.join(FIXTURES, 'stacks', fixture)}\n`,
    { mode: 0o755 },
  );
  return { python, calls: () => fs.readFileSync(log, 'utf8').trim().split('\n') };
}

test('Show Stacks asks for --history 16; a harness from before --history is asked again without it', async () => {
  const now = fakeHarness(false, 'uneven_history.json');
  const run = (python: string) => (args: string[]) => runHarness({ python, module: 'rtdebug' }, args, 10000);
  const rep = await takeStacks(run(now.python), 's1', undefined, 16);
  assert.equal(rep.history?.groups.length, 1);
  assert.deepEqual(now.calls(), ['-m rtdebug stacks --session s1 --history 16 --json']);
  const old = fakeHarness(true, 'hang.json');
  const rep2 = await takeStacks(run(old.python), 's1', 2, 16);
  assert.equal(rep2.history, undefined);
  assert.deepEqual(
    rep2.groups.map((g) => g.ranks),
    [[0, 2, 3], [1]],
  );
  assert.deepEqual(old.calls(), [
    '-m rtdebug stacks --session s1 --rank 2 --history 16 --json',
    '-m rtdebug stacks --session s1 --rank 2 --json',
  ]);
});

test("any other stacks failure is not retried and keeps the CLI's own line", async () => {
  const d = tmpDir();
  const python = path.join(d, 'python');
  fs.writeFileSync(
    python,
    '#!/bin/sh\n[ "$1" = -m ] || exit 1\necho "$*" >> ' +
      path.join(d, 'calls') +
      '\necho "rtdebug: error: no live rtdebug session s9" >&2\nexit 1\n',
    { mode: 0o755 },
  );
  await assert.rejects(
    takeStacks((args) => runHarness({ python, module: 'rtdebug' }, args, 10000), 's9', undefined, 16),
    (e: Error) => e.message === `${python} -m rtdebug stacks failed: rtdebug: error: no live rtdebug session s9`,
  );
  assert.equal(fs.readFileSync(path.join(d, 'calls'), 'utf8').trim().split('\n').length, 1);
});
