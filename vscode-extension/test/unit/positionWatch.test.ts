import * as assert from 'assert';
import { test } from 'node:test';
import { collectiveSummary } from '../../src/ranks/collectiveText';
import { PositionWatch, STILL_MS } from '../../src/ranks/positionWatch';
import { Collective } from '../../src/registry/collectiveRecord';

const at = (seq: number, op = 'ALLREDUCE'): Collective => ({ op, seq, state: 'entered', pg: '0', file: '/p/train.py', line: 42 });
const job = (a: number, b: number, opB = 'ALLREDUCE') => [
  { rank: 0, collective: at(a) },
  { rank: 1, collective: at(b, opB) },
];

test('a healthy job one collective apart at every poll is moving, never the hang badge', () => {
  const w = new PositionWatch();
  let seq = 812;
  for (let poll = 0; poll < 10; poll++, seq += 300) {
    const ranks = job(seq, seq - 1);
    const moving = w.moving('s1', ranks, poll * 1000);
    assert.deepEqual([...moving].sort(), [0, 1], `poll ${poll}`);
    const sum = collectiveSummary(ranks, moving)!;
    assert.deepEqual(sum, { text: `collectives moving: rank 0 ALLREDUCE #${seq} · rank 1 ALLREDUCE #${seq - 1}`, differ: false });
  }
});

test('positions unchanged across polls for STILL_MS raise the badge; the same poll shown twice does not', () => {
  const w = new PositionWatch();
  const hung = job(812, 812, 'BARRIER');
  assert.equal(w.moving('s1', hung, 0).size, 2, 'first seen: not yet known to stand still');
  assert.equal(w.moving('s1', hung, 10).size, 2, 'one poll shown again a moment later: still not known');
  assert.equal(w.moving('s1', hung, STILL_MS - 1).size, 2);
  const still = w.moving('s1', hung, STILL_MS);
  assert.equal(still.size, 0);
  assert.deepEqual(collectiveSummary(hung, still), {
    text: 'collectives differ: rank 0 ALLREDUCE #812 · rank 1 BARRIER #812',
    differ: true,
  });
  // rank 1 moves on: the badge goes at once, and comes back only after it stands still again
  const on = job(812, 813);
  assert.deepEqual([...w.moving('s1', on, STILL_MS + 1000)], [1]);
  assert.equal(collectiveSummary(on, w.moving('s1', on, STILL_MS + 1500))!.differ, false);
  assert.equal(collectiveSummary(on, w.moving('s1', on, 2 * STILL_MS + 1000))!.differ, true);
  // an ended session is forgotten: seen again, it starts over
  w.keep(new Set());
  assert.equal(w.moving('s1', hung, 10 * STILL_MS).size, 2);
});
