import * as assert from 'assert';
import * as fs from 'fs';
import * as path from 'path';
import { test } from 'node:test';
import Ajv2020 from 'ajv/dist/2020';
import { parseRankEntry } from '../../src/registry/registryModel';
import { parseStop, stopText } from '../../src/registry/stopEntry';
import { rankRow, rankViewState, sessionLive, sessionRow } from '../../src/ranks/ranksTree';
import { FIXTURES, SCHEMA_PATH } from './helpers';
import { rankEntry, sessionOf } from './session';

/** Ranks stopped by --stop-on in the Ranks view: the entry's `stop`, read as `rtdebug ps` reads it, and the DAP description. */
const schema = JSON.parse(fs.readFileSync(SCHEMA_PATH, 'utf8'));
const validate = new Ajv2020({ strict: false }).compile(schema);
const base = JSON.parse(fs.readFileSync(path.join(FIXTURES, 'registry', 's1', 'rank-0.json'), 'utf8'));
const STOP = { kind: 'nonfinite', reason: 'non-finite loss and grad of fc1.weight (+3 more) at step 5 (origin)', origin: true, step: 5 };

test("an entry's stop validates against the schema and reads as rtdebug ps shows it", () => {
  assert.ok(validate({ ...base, state: 'ready', stop: STOP }), JSON.stringify(validate.errors));
  assert.ok(validate({ ...base, stop: null }));
  const r = parseRankEntry(JSON.stringify({ ...base, state: 'ready', stop: STOP }));
  assert.deepEqual(r.stop, STOP);
  assert.equal(stopText(r.stop!), 'stopped (nonfinite: non-finite loss and grad of fc1.weight (+3 more) at step 5 (origin))');
  assert.equal(parseRankEntry(JSON.stringify(base)).stop, null);
});

test('a forged stop is cut as the harness cuts it: 12 alphanumerics of the kind, 120 printable characters of the reason', () => {
  const s = parseStop({ kind: 'non-finite!<b>xxxxxxxx', reason: `a\nb\u0007${'y'.repeat(200)}`, origin: 'yes', step: -1 })!;
  assert.equal(s.kind, 'nonfinite');
  assert.equal(s.reason, `a?b?${'y'.repeat(116)}`);
  assert.equal(s.origin, null);
  assert.equal(s.step, null);
  assert.equal(parseStop({ kind: 'nonfinite' }), null, 'no reason: not a stop');
  assert.equal(parseStop('stopped'), null);
  assert.equal(parseStop({ kind: null, reason: 'r' })?.kind, 'None');
});

test('view: a held rank waiting for a debugger is "stopped (kind: reason)", attachable; attached ones say the DAP description', () => {
  const held = rankEntry(1, 'ready', { stop: STOP, wait: true });
  assert.deepEqual(rankViewState(held, undefined), { state: 'halted', text: stopText(STOP) });
  const s = sessionOf([rankEntry(0, 'ready', { stop: { ...STOP, origin: false } }), held]);
  const row = rankRow(s, held, undefined);
  assert.equal(row.contextValue, 'rtdebugRank.halted', 'the Attach action matches it');
  assert.match(row.description, /^stopped \(nonfinite: non-finite loss/);
  assert.match(row.tooltip, /--stop-on nonfinite: it began here \(origin\), at step 5/);
  assert.equal(rankViewState(rankEntry(1, 'attached', { stop: STOP }), undefined).text, `${stopText(STOP)}, another client attached`);
  const ours = rankViewState(rankEntry(1, 'attached'), {
    state: 'stopped',
    reason: 'breakpoint',
    description: 'rtdebug --stop-on nonfinite: non-finite loss at step 5 (origin)',
    where: { file: '/p/train.py', line: 42 },
  });
  assert.deepEqual(ours, { state: 'stopped', text: 'stopped (nonfinite: non-finite loss at step 5 (origin)) at train.py:42' });
  const live = sessionLive(s, () => undefined, 0);
  assert.equal(live.stopOn, 'stopped by --stop-on nonfinite (origin: rank 1)');
  assert.match(sessionRow(s, live).description, / · running · stopped by --stop-on nonfinite \(origin: rank 1\)$/);
});
