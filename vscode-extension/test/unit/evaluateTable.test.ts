import * as assert from 'assert';
import { test } from 'node:test';
import { evaluateMarkdown, majority, markDivergent } from '../../src/ranks/evaluateTable';

test('majority: most common, ties to the first seen', () => {
  assert.equal(majority(['1', '2', '2']), '2');
  assert.equal(majority(['a', 'b']), 'a');
  assert.equal(majority([]), undefined);
});

test('markDivergent: the odd rank is marked; all equal or errors are not', () => {
  const m = markDivergent([
    { rank: 0, value: '0.5' },
    { rank: 1, value: '0.5' },
    { rank: 2, value: 'nan' },
    { rank: 3, error: 'NameError' },
  ]);
  assert.deepEqual(
    m.map((r) => r.differs),
    [false, false, true, false],
  );
  assert.deepEqual(
    markDivergent([
      { rank: 0, value: '1' },
      { rank: 1, value: '1' },
    ]).map((r) => r.differs),
    [false, false],
  );
  // no strict majority (each rank its own rank number): every value differs
  assert.deepEqual(
    markDivergent([
      { rank: 0, value: '0' },
      { rank: 1, value: '1' },
    ]).map((r) => r.differs),
    [true, true],
  );
});

test('evaluateMarkdown: one row per rank, sorted, cells escaped, divergence summarised', () => {
  const md = evaluateMarkdown(
    'x.shape',
    's1',
    [
      { rank: 1, value: 'torch.Size([8, 3])', where: 'step (t.py:4)' },
      { rank: 0, value: 'torch.Size([8, 4])', where: 'step (t.py:4)' },
      { rank: 2, value: 'torch.Size([8, 4])', where: 'step (t.py:4)' },
      { rank: 3, error: 'a|b\nc' },
    ],
    [4],
  );
  const rows = md.split('\n').filter((l) => /^\| \d/.test(l));
  assert.deepEqual(
    rows.map((r) => r.split(' | ')[0]),
    ['| 0', '| 1', '| 2', '| 3'],
  );
  assert.match(rows[1], /`torch.Size\(\[8, 3\]\)` \| ⚠ differs/);
  assert.doesNotMatch(rows[0], /differs/);
  assert.match(rows[3], /a\\\|b ⏎ c/);
  assert.match(md, /not stopped \(skipped\): 4/);
  assert.match(md, /\*\*1 differ from the majority\*\*/);
});
