import * as assert from 'assert';
import { test } from 'node:test';
import { adoptArgs, adoptPickItems, parseAdoptList } from '../../src/attach/adopt/adoptModel';
import { formatDuration } from '../../src/common/duration';
import { cliLine } from '../../src/common/harnessCli';

const job = (over: Record<string, unknown> = {}) => ({
  pid: 4242,
  kind: 'torchrun',
  script: '/home/u/proj/train.py',
  ranks: [0, 1],
  world_size: 2,
  running_s: 3725.4,
  adopted_session: null,
  ...over,
});

test('parseAdoptList keeps well-formed candidates and drops forged or half-read ones', () => {
  const list = parseAdoptList(
    JSON.stringify([
      job(),
      job({ pid: -1 }),
      job({ ranks: ['0'] }),
      { pid: 7 },
      'x',
      job({ pid: 9, kind: 'ray', ranks: [null], world_size: 'two', adopted_session: 's1' }),
    ]),
  );
  assert.deepEqual(
    list.map((c) => [c.pid, c.kind, c.worldSize, c.adoptedSession]),
    [
      [4242, 'torchrun', 2, null],
      [9, 'ray', null, 's1'],
    ],
  );
  assert.deepEqual(parseAdoptList('[]'), []);
  assert.throws(
    () => parseAdoptList('Traceback (most recent call last):\n  boom'),
    /^Error: adopt --list --json printed no JSON: Traceback \(most recent call last\):$/,
  );
  assert.throws(() => parseAdoptList('{"pid": 1}'), /expected a list of jobs/);
});

test('pick rows say pid, script, ranks and running time; an adopted job says picking it changes nothing', () => {
  const [a, b, c] = adoptPickItems(
    parseAdoptList(
      JSON.stringify([
        job(),
        job({ pid: 5, ranks: [3, 0, 1, 2], world_size: 8, running_s: 42, adopted_session: 'sess-1' }),
        job({ pid: 6, ranks: [null, 1] }),
      ]),
    ),
  );
  assert.equal(a.label, '$(server-process) train.py');
  assert.equal(a.description, 'pid 4242 · torchrun · ranks 0,1 of 2 · running 1h 02m');
  assert.equal(a.detail, '/home/u/proj/train.py');
  assert.equal(a.pid, 4242);
  assert.equal(b.label, '$(debug-alt) train.py');
  assert.equal(b.description, 'pid 5 · torchrun · ranks 0-3 of 8 · running 42s');
  assert.match(b.detail, /adopted already \(session sess-1\): picking it again changes nothing$/);
  assert.equal(c.description, 'pid 6 · torchrun · rank 1 (+1 unknown) of 2 · running 1h 02m');
  assert.deepEqual(adoptArgs(4242), ['adopt', '4242']);
});

test('formatDuration', () => {
  assert.deepEqual([0, 59.9, 60, 605, 3600, 3725, -3].map(formatDuration), ['0s', '59s', '1m 00s', '10m 05s', '1h 00m', '1h 02m', '0s']);
});

test("cliLine: the CLI's own last `rtdebug:` line, for a one-line refusal", () => {
  assert.equal(
    cliLine('rtdebug: warning: x\nrtdebug: cannot adopt pid 5: gdb is missing (apt-get install gdb)\n'),
    'rtdebug: cannot adopt pid 5: gdb is missing (apt-get install gdb)',
  );
  assert.equal(cliLine('Traceback\nValueError'), undefined);
});
