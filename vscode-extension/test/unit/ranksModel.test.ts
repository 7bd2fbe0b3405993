import * as assert from 'assert';
import { test } from 'node:test';
import { RankDebugInfo } from '../../src/attach/allstop/rankDebugState';
import { GROUP_AUTO, GROUP_NONE, groupByItems, groupDim, groupRanks, groupRow, stateSummary } from '../../src/ranks/rankGroups';
import { RanksModel, RanksNode } from '../../src/ranks/ranksModel';
import { RankEntry, Session } from '../../src/registry/registryModel';
import { rankEntry, sessionOf } from './session';

/** The Ranks view grouped by a mesh dimension, and updates that say only what changed (issue 31: 1024 ranks). */
const coll = (op: string, seq: number) => ({ op, seq, state: 'returned' as const });
function job(n: number, over: (r: number) => Partial<RankEntry> = () => ({})): Session {
  const tp = 2;
  return sessionOf(
    Array.from({ length: n }, (_, r) =>
      rankEntry(r, 'ready', {
        world_size: n,
        meshes: [{ dims: ['dp', 'tp'], shape: [n / tp, tp], coord: [Math.floor(r / tp), r % tp] }],
        ...over(r),
      }),
    ),
  );
}
const ids = (ns: RanksNode[]) =>
  ns.map((n) =>
    n.kind === 'rank' ? `rank ${n.rank.rank}` : n.kind === 'group' ? `${n.group.dim}=${n.group.value}` : n.session.entry.session_id,
  );

test('the default groups by the first dim of the first mesh; a chosen dim, or none', () => {
  const s = job(8);
  assert.equal(groupDim(s, GROUP_AUTO), 'dp');
  assert.equal(groupDim(s, 'tp'), 'tp');
  assert.equal(groupDim(s, 'pp'), undefined, 'a dim this session lacks: flat');
  assert.equal(groupDim(s, GROUP_NONE), undefined);
  assert.equal(groupDim(sessionOf([rankEntry(0, 'ready')]), GROUP_AUTO), undefined, 'no mesh yet: the flat list, as before');
  const late = { ...s, ranks: [...s.ranks, rankEntry(8, 'starting', { world_size: 9 })] };
  assert.deepEqual(
    groupRanks(late, 'tp').map((g) => [g.value, g.ranks.map((r) => r.rank)]),
    [
      [0, [0, 2, 4, 6]],
      [1, [1, 3, 5, 7]],
      [undefined, [8]],
    ],
  );
  assert.deepEqual(
    groupByItems([s], 'tp').map((i) => [i.label, i.description, i.picked]),
    [
      ['default', 'the first dimension of the first mesh', false],
      ['dp', '4 groups: dp=0 … dp=3', false],
      ['tp', '2 groups: tp=0 … tp=1 (current)', true],
      ['none', 'every rank in one flat list', false],
    ],
  );
});

test('a group row: its coordinate, a state summary and a collective summary', () => {
  assert.equal(stateSummary(['stopped', 'ready', 'ready', 'halted', 'ready', 'failed', 'ready']), '4 ready, 2 stopped, 1 failed');
  const s = job(4, (r) => ({ collective: r === 3 ? coll('BARRIER', 3) : coll('ALLREDUCE', 12) }));
  const [g0, g1] = groupRanks(s, 'dp');
  const row0 = groupRow(s, g0, ['ready', 'stopped']);
  assert.deepEqual(
    [row0.id, row0.label, row0.description],
    ['group:s1/dp=0', 'dp=0', '2 ranks · 1 ready, 1 stopped · all at ALLREDUCE #12'],
  );
  assert.equal(row0.contextValue, 'rtdebugRankGroup');
  assert.equal(row0.icon, 'debug-pause');
  const row1 = groupRow(s, g1, ['ready', 'ready']);
  assert.equal(row1.description, '2 ranks · 2 ready · collectives differ: rank 2 ALLREDUCE #12 · rank 3 BARRIER #3');
  assert.equal(row1.icon, 'warning');
  assert.match(row1.tooltip, /^dp=1: ranks 2-3 of session s1$/m);
  assert.equal(row1.accessibilityLabel, 'dp=1, 2 ranks, 2 ready, collectives differ: rank 2 ALLREDUCE #12 · rank 3 BARRIER #3');
});

test('first render: sessions → groups (collapsed) → ranks; the same node objects from then on', () => {
  const m = new RanksModel();
  const sessions = [job(1024)];
  const c = m.update({ sessions, dbg: () => undefined, nowMs: 0, groupBy: GROUP_AUTO });
  assert.deepEqual(c, { root: true, nodes: [] });
  const [s] = m.children();
  const groups = m.children(s);
  assert.equal(groups.length, 512);
  assert.equal(m.row(groups[0])!.description, '2 ranks · 2 ready');
  assert.deepEqual(ids(m.children(groups[3])), ['rank 6', 'rank 7']);
  assert.equal(m.parent(m.children(groups[3])[0]), groups[3]);
  assert.equal(m.row(m.children(groups[3])[0])!.tooltip, '', 'rank tooltips are built on hover only');
  assert.match(m.tooltip(m.children(groups[3])[0])!, /^rank 6 of 1024/);
  // nothing changed: nothing to refresh; the nodes are the same objects
  assert.deepEqual(m.update({ sessions: [job(1024)], dbg: () => undefined, nowMs: 0, groupBy: GROUP_AUTO }), { root: false, nodes: [] });
  assert.equal(m.children()[0], s);
  assert.equal(m.children(s)[3], groups[3]);
});

test("one rank's new state refreshes its group (collapsed: nothing else), never the root; flat: that rank alone", () => {
  const m = new RanksModel();
  const dbg = new Map<number, RankDebugInfo>();
  const input = (groupBy: string) => ({ sessions: [job(1024)], dbg: (_s: string, r: number) => dbg.get(r), nowMs: 0, groupBy });
  m.update(input(GROUP_AUTO));
  dbg.set(517, { state: 'stopped', reason: 'breakpoint' });
  const c = m.update(input(GROUP_AUTO));
  assert.equal(c.root, false);
  assert.deepEqual(ids(c.nodes), ['dp=258']);
  assert.equal(m.row(c.nodes[0])!.description, '2 ranks · 1 ready, 1 stopped');
  // a rank's row that changes without its group's summary changing: that rank only
  dbg.set(517, { state: 'stopped', reason: 'breakpoint', where: { file: '/p/t.py', line: 3 } });
  assert.deepEqual(ids(m.update(input(GROUP_AUTO)).nodes), ['rank 517']);

  const flat = new RanksModel();
  dbg.clear();
  flat.update(input(GROUP_NONE));
  dbg.set(5, { state: 'running' });
  assert.deepEqual(ids(flat.update(input(GROUP_NONE)).nodes), ['rank 5']);
});

test('structure: a new rank refreshes its session (whose row counts ranks); a rank that moves between groups, or a new grouping, its session; sessions, the root', () => {
  const m = new RanksModel();
  const s8 = job(8);
  m.update({ sessions: [s8], dbg: () => undefined, nowMs: 0, groupBy: GROUP_AUTO });
  const noMesh = { ...s8, ranks: s8.ranks.map((r) => (r.rank === 7 ? { ...r, meshes: [] } : r)) };
  assert.deepEqual(ids(m.update({ sessions: [noMesh], dbg: () => undefined, nowMs: 0, groupBy: GROUP_AUTO }).nodes), ['s1']);
  assert.deepEqual(ids(m.update({ sessions: [s8], dbg: () => undefined, nowMs: 0, groupBy: 'tp' }).nodes), ['s1']);
  const more = {
    ...s8,
    ranks: [...s8.ranks, rankEntry(8, 'starting', { world_size: 10, meshes: [{ dims: ['dp', 'tp'], shape: [5, 2], coord: [4, 0] }] })],
  };
  const c = m.update({ sessions: [more], dbg: () => undefined, nowMs: 0, groupBy: 'tp' });
  assert.deepEqual(ids(c.nodes), ['s1']);
  const tp0 = m.children(m.children()[0])[0];
  assert.deepEqual(ids(m.children(tp0)), ['rank 0', 'rank 2', 'rank 4', 'rank 6', 'rank 8'], 'rank 8 joins tp=0');
  assert.equal(
    m.update({
      sessions: [more, sessionOf([rankEntry(0, 'ready', { session_id: 's2' })], 's2')],
      dbg: () => undefined,
      nowMs: 0,
      groupBy: 'tp',
    }).root,
    true,
  );
});
