import * as assert from 'assert';
import { test } from 'node:test';
import { collectiveSummary, collectiveText, peersTooltip } from '../../src/ranks/collectiveText';
import { isBlocked, parseCollective } from '../../src/registry/collectiveRecord';
import { rankRow, sessionLive, sessionRow } from '../../src/ranks/ranksTree';
import { mergeSessions, parsePsJson } from '../../src/registry/rankSource';
import { rankEntry, sessionOf } from './session';

const NOW = 1_800_000_000_000;
const coll = (over: Record<string, unknown> = {}) => ({
  op: 'ALLREDUCE',
  seq: 12,
  state: 'returned',
  file: '/p/train.py',
  line: 42,
  func: 'step',
  shapes: [[4]],
  dtype: 'float32',
  pg: '0',
  since: NOW / 1000 - 40,
  ...over,
});

test('parseCollective checks every field of a record anyone who can write the session dir could forge', () => {
  assert.equal(parseCollective(coll())?.op, 'ALLREDUCE');
  for (const bad of [
    null,
    'x',
    coll({ op: 'all_reduce; rm -rf' }),
    coll({ op: 'A'.repeat(41) }),
    coll({ seq: -1 }),
    coll({ seq: 1.5 }),
    coll({ state: 'done' }),
  ]) {
    assert.equal(parseCollective(bad), null, JSON.stringify(bad));
  }
  const odd = parseCollective(coll({ file: 7, line: 'x', since: 'yesterday' }))!;
  assert.deepEqual([odd.file, odd.line, odd.since], [undefined, undefined, undefined]);
});

test('rank fragment: op #seq state; entered for seconds is blocked, with where and how long', () => {
  assert.equal(collectiveText(parseCollective(coll()), NOW), 'ALLREDUCE #12 returned');
  assert.equal(collectiveText(parseCollective(coll({ state: 'entered', since: NOW / 1000 - 1 })), NOW), 'ALLREDUCE #12 entered');
  const blocked = parseCollective(coll({ state: 'entered' }));
  assert.equal(isBlocked(blocked, NOW), true);
  assert.equal(collectiveText(blocked, NOW), 'blocked in ALLREDUCE #12 (train.py:42) 40s');
  assert.equal(collectiveText(null, NOW), undefined);
  assert.equal(collectiveText(blocked, NOW, true), 'at ALLREDUCE #12, not run yet', 'stopped at it by Run to Next Collective: not blocked');
});

test("peers' positions and the session summary: same op/seq, or which rank differs", () => {
  const r0 = { rank: 0, collective: parseCollective(coll({ state: 'entered' })) };
  const r1 = {
    rank: 1,
    collective: parseCollective(coll({ op: 'BARRIER', seq: 3, state: 'entered', file: '/p/hang.py', line: 26, since: NOW / 1000 - 5 })),
  };
  assert.deepEqual(peersTooltip([r0, r1, { rank: 2, collective: null }], 1, NOW), [
    'collectives (rtdebug ps):',
    '  rank 0: ALLREDUCE #12 entered (train.py:42) 40s ago',
    '  rank 1: BARRIER #3 entered (hang.py:26) 5s ago  ← this rank',
    '  rank 2: none yet',
  ]);
  assert.deepEqual(collectiveSummary([r0, r1]), { text: 'collectives differ: rank 0 ALLREDUCE #12 · rank 1 BARRIER #3', differ: true });
  assert.deepEqual(collectiveSummary([r0, { rank: 1, collective: parseCollective(coll()) }]), {
    text: 'all at ALLREDUCE #12',
    differ: false,
  });
  assert.equal(collectiveSummary([r0]), undefined);
  assert.deepEqual(peersTooltip([{ rank: 0 }], 0, NOW), []);
});

test('ps --json collectives and pg timeout reach the rows; the files win but take both from the CLI listing', () => {
  const cli = parsePsJson(
    JSON.stringify({
      sessions: [
        {
          ...sessionOf([]).entry,
          pg_timeout_s: 1800,
          pg_timeout_source: 'gloo default',
          ranks: [
            { ...rankEntry(0, 'attached'), collective: coll({ state: 'entered' }) },
            { ...rankEntry(1, 'ready'), collective: { op: 'bad' } },
          ],
        },
      ],
    }),
  );
  assert.equal(cli[0].ranks[1].collective, null);
  const [s] = mergeSessions([sessionOf([rankEntry(0, 'ready'), rankEntry(1, 'ready')])], cli);
  assert.equal(s.ranks[0].state, 'ready', 'the files win');
  assert.equal(s.ranks[0].collective?.op, 'ALLREDUCE');
  assert.deepEqual([s.entry.pg_timeout_s, s.entry.pg_timeout_source], [1800, 'gloo default']);
  const row = rankRow(s, s.ranks[0], undefined, NOW);
  assert.match(row.description, /^ready · blocked in ALLREDUCE #12 \(train\.py:42\) 40s · local 0/);
  assert.equal(row.icon, 'debug-stackframe-dot', 'shown as blocked');
  assert.equal(row.contextValue, 'rtdebugRank.ready', 'menus still see the rank as ready (attachable)');
  assert.match(row.tooltip, /rank 0: ALLREDUCE #12 entered \(train\.py:42\) 40s ago {2}← this rank/);
  const live = sessionLive(s, () => undefined, NOW);
  const sr = sessionRow(s, live);
  assert.match(sr.description, / · running · pg timeout 30m 00s \(gloo default\)$/);
  assert.equal(
    parsePsJson(JSON.stringify({ sessions: [{ ...sessionOf([]).entry, pg_timeout_s: -5, ranks: [] }] }))[0].entry.pg_timeout_s,
    null,
  );
});
