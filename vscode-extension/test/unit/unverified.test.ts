import * as assert from 'assert';
import { test } from 'node:test';
import { implicitSession, rankPickItems, sessionPickItems } from '../../src/attach/rank/quickPickItems';
import { parsePsJson, psSkipped } from '../../src/registry/rankSource';
import { rankRow, ranksViewMessage, sessionRow, UNVERIFIED_NOTE } from '../../src/ranks/ranksTree';
import { findSession } from '../../src/registry/registryReader';
import { Session } from '../../src/registry/registryModel';
import { rankEntry, sessionOf } from './session';

/** A forged remote session as `rtdebug ps --json` lists it: newest of all, and unverified. */
function forged(started = 99): Session {
  const s = sessionOf(
    [rankEntry(0, 'ready', { session_id: 'forged', host: '203.0.113.66', port: 4444, verified: false })],
    'forged',
    started,
  );
  return { ...s, entry: { ...s.entry, source: 'c10d store 10.0.0.1:29500', verified: false } };
}

test('ps --json: verified flags are kept, the skipped list is read in the harness words', () => {
  const text = JSON.stringify({
    schema_version: 1,
    sessions: [{ ...forged().entry, ranks: forged().ranks }],
    skipped: [{ source: 'c10d store 10.0.0.1:29500', key: 'rtdebug/jobs/x', error: 'not a valid record (missing "session_id")' }, 'junk'],
  });
  const [s] = parsePsJson(text);
  assert.equal(s.entry.verified, false);
  assert.equal(s.ranks[0].verified, false);
  assert.deepEqual(psSkipped(text), [
    `rtdebug: warning: skipped c10d store 10.0.0.1:29500 entry 'rtdebug/jobs/x': not a valid record (missing "session_id")`,
  ]);
  assert.deepEqual(psSkipped(JSON.stringify({ sessions: [] })), []);
  assert.deepEqual(psSkipped('oops'), []);
});

test('the Ranks view marks an unverified session and its ranks, in the description, tooltip and screen-reader label', () => {
  const f = forged();
  const row = sessionRow(f);
  assert.match(row.description, /^unverified · torchrun t\.py/);
  assert.ok(row.tooltip.includes(UNVERIFIED_NOTE));
  assert.equal(row.icon, 'unverified');
  assert.match(row.accessibilityLabel, /^rtdebug session forged, unverified,/);
  assert.equal(row.contextValue, 'rtdebugSession', 'the menus stay (Stop goes through the harness, which checks its own processes)');
  const r = rankRow(f, f.ranks[0], undefined);
  assert.match(r.description, /^unverified · ready · local 0 · 203\.0\.113\.66:4444/);
  assert.ok(r.tooltip.includes(UNVERIFIED_NOTE));
  assert.match(r.accessibilityLabel, /^rank 0, unverified, ready/);
  // a verified session with one unverified (merged) rank: only that rank is marked
  const mixed = sessionOf([rankEntry(0, 'ready'), rankEntry(1, 'ready', { verified: false })]);
  assert.doesNotMatch(sessionRow(mixed).description, /unverified/);
  assert.doesNotMatch(rankRow(mixed, mixed.ranks[0], undefined).description, /unverified/);
  assert.match(rankRow(mixed, mixed.ranks[1], undefined).description, /^unverified · /);
  assert.deepEqual(
    rankPickItems([mixed]).map((i) => i.description.startsWith('unverified · ')),
    [false, true],
  );
  assert.match(rankPickItems([f])[0].description, /^unverified · 203\.0\.113\.66:4444 · ready/);
});

test('an unverified session is never the default, however late it started', () => {
  const mine = sessionOf([rankEntry(0, 'ready')], 'mine', 5);
  assert.equal(findSession([forged(), mine])?.entry.session_id, 'mine');
  assert.equal(findSession([forged()]), undefined);
  assert.equal(findSession([forged(), mine], 'forged')?.entry.session_id, 'forged', 'named explicitly, it is found');
  // "Attach to All Ranks": the only session is taken without asking, unless it is unverified
  assert.equal(implicitSession([mine])?.entry.session_id, 'mine');
  assert.equal(implicitSession([forged()]), undefined);
  assert.equal(implicitSession([mine, sessionOf([], 'other', 2)]), undefined);
  assert.deepEqual(
    sessionPickItems([forged(), mine]).map((i) => [i.label, i.description, i.detail]),
    [
      ['forged', 'unverified · torchrun /p/t.py', '1 live rank(s) · via c10d store 10.0.0.1:29500'],
      ['mine', 'torchrun /p/t.py', '1 live rank(s)'],
    ],
  );
});

test("the view's message: a refused registry root first, else the junk ps skipped", () => {
  assert.equal(ranksViewMessage(undefined, []), undefined);
  assert.equal(
    ranksViewMessage('registry /r is open to other users (mode 0o755); run: chmod 700 /r', ['x']),
    'rtdebug: registry /r is open to other users (mode 0o755); run: chmod 700 /r',
  );
  assert.equal(
    ranksViewMessage(undefined, ["rtdebug: warning: skipped Ray KV entry 'k': no session_id"]),
    "rtdebug ps skipped a remote entry that is not a valid record: Ray KV entry 'k': no session_id",
  );
  assert.match(ranksViewMessage(undefined, ['a', 'b']) ?? '', /^rtdebug ps skipped 2 remote entries that are not a valid record: a$/);
});
