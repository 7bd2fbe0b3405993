import * as assert from 'assert';
import { test } from 'node:test';
import { CheckRun, checkStopOn, checkWith } from '../../src/common/harnessCheck';
import { answersMessage, configureExpression, fromHexAnswer, mustTurnOff, turnedOff } from '../../src/stopon/stopOnAnswers';
import { harnessPython } from './helpers';

/** "Stop All Ranks When…": the --stop-on spec checked by the CLI (`rtdebug check --stop-on`), and the answers message. */
const py = harnessPython();
const run: CheckRun | undefined = py ? checkWith({ python: py, module: 'rtdebug' }) : undefined;
const canon = async (spec: string) => {
  const c = await checkStopOn(run!, spec);
  assert.ok(c.valid, JSON.stringify(c));
  return c.stop_on;
};
const problem = async (spec: string) => {
  const c = await checkStopOn(run!, spec);
  return c.valid ? undefined : c.error;
};

test('the CLI answers the canonical spelling the ranks are given', { skip: !py && 'no harness venv' }, async () => {
  assert.equal(await canon('nonfinite'), 'nonfinite');
  assert.equal(await canon('nonfinite,nonfinite:deep'), 'nonfinite:deep');
  assert.equal(await canon('disagree'), 'disagree:100');
  assert.equal(await canon('disagree:007'), 'disagree:7');
  assert.equal(await canon(' nonfinite , step=1 '), 'nonfinite,step=1');
  assert.equal(await canon('step=0,disagree:3,nonfinite:deep'), 'nonfinite:deep,disagree:3,step=0');
  assert.equal(await canon('  '), '');
});

test("a bad condition is the CLI's line, the user's text quoted as Python quotes it", { skip: !py && 'no harness venv' }, async () => {
  const line = (x: string) =>
    `--stop-on: unknown condition ${x}; the conditions are nonfinite, nonfinite:deep, disagree, disagree:N, step=N`;
  assert.equal(await problem('nan'), line("'nan'"));
  assert.equal(await problem('-x'), line("'-x'"), 'a spec that starts with "-" is still the spec');
  assert.equal(await problem('x'.repeat(60)), line(`'${'x'.repeat(40)}'`));
  assert.equal(await problem(`é'"`), line(`'\\xe9\\'"'`));
  assert.equal(await problem('☃'), line("'\\u2603'"));
  assert.equal(await problem('disagree:0'), '--stop-on disagree:0: N must be at least 1');
  assert.equal(await problem('nonfinite,step=3'), undefined);
});

test('what each rank evaluates: the harness arm.configure of the canonical spelling, its answer hex-encoded', () => {
  assert.equal(
    configureExpression('nonfinite,step=5'),
    "__import__('rtdebug.rank.api', fromlist=['_']).configure_stop_on('nonfinite,step=5').encode().hex()",
  );
  assert.equal(configureExpression(''), "__import__('rtdebug.rank.api', fromlist=['_']).configure_stop_on('').encode().hex()");
  assert.throws(() => configureExpression("x'); import os; ('"), /not a canonical --stop-on spelling/);
  const hex = (s: string) => `'${Buffer.from(s, 'utf8').toString('hex')}'`;
  assert.equal(fromHexAnswer(hex('rtdebug: rank 0 stops on nonfinite')), 'rtdebug: rank 0 stops on nonfinite');
  assert.equal(fromHexAnswer(hex("it's é☃\n")), "it's é☃\n");
  assert.equal(fromHexAnswer("'abc'"), "'abc'", 'not hex: as it came');
  assert.equal(fromHexAnswer('42'), '42');
});

/** A rank's answer as DAP's evaluate gives it for configureExpression: the line's UTF-8 in hex, in a str repr. */
const hex = (s: string) => `'${Buffer.from(s, 'utf8').toString('hex')}'`;

test('answers: ranks that said the same are one phrase; what went wrong comes first, with why', () => {
  const ok = (rank: number, spec = 'nonfinite') => ({ rank, result: hex(`rtdebug: rank ${rank} stops on ${spec}`) });
  assert.deepEqual(answersMessage([ok(0), ok(1), ok(2), ok(3)]), {
    text: 'rtdebug: ranks 0-3 stop on nonfinite',
    level: 'info',
    ok: [0, 1, 2, 3],
  });
  assert.equal(answersMessage([ok(1)]).text, 'rtdebug: rank 1 stops on nonfinite');
  const mixed = answersMessage(
    [ok(0, 'nonfinite,step=5'), { rank: 1, error: 'did not stop within 15 s (in C code: a collective?)' }, ok(2, 'nonfinite,step=5')],
    [3],
  );
  assert.equal(
    mixed.text,
    'rtdebug: rank 1: not set (did not stop within 15 s (in C code: a collective?)); ranks 0,2 stop on nonfinite,step=5; rank 3 not attached here: not set',
  );
  assert.equal(mixed.level, 'warning');
  assert.deepEqual(mixed.ok, [0, 2]);
  // the harness's own refusal (an older harness, a rank without torch hooks): its words
  const refused = answersMessage([{ rank: 0, result: hex("rtdebug: --stop-on: unknown condition 'x'; the conditions are …") }]);
  assert.equal(refused.text, "rtdebug: rank 0: --stop-on: unknown condition 'x'; the conditions are …");
  assert.equal(refused.level, 'error');
  assert.equal(answersMessage([{ rank: 0, result: hex('rtdebug: rank 0: --stop-on is off') }]).text, 'rtdebug: rank 0: --stop-on is off');
  // a forged or garbled answer stays one line
  assert.equal(answersMessage([{ rank: 0, result: 'line one\nline two' }]).text, 'rtdebug: rank 0: line one?line two');
  assert.equal(answersMessage([]).text, 'rtdebug: no rank is attached here');
  // 1024 ranks that agree: one short line
  const many = answersMessage(Array.from({ length: 1024 }, (_, r) => ok(r)));
  assert.equal(many.text, 'rtdebug: ranks 0-1023 stop on nonfinite');
});

test('every rank takes it, or none: the ranks that did are turned off again, and the message says so', () => {
  const msg = answersMessage([
    { rank: 0, result: hex('rtdebug: rank 0 stops on nonfinite') },
    { rank: 1, error: "AttributeError: 'DistributedDataParallel' object has no attribute 'module'" },
    { rank: 2, result: hex('rtdebug: rank 2 stops on nonfinite') },
  ]);
  assert.equal(mustTurnOff('nonfinite', msg, 3), true);
  assert.equal(mustTurnOff('', msg, 3), false, 'turning off in some ranks is not undone');
  assert.equal(mustTurnOff('nonfinite', answersMessage([{ rank: 0, error: 'x' }]), 1), false, 'none took it: nothing to undo');
  assert.deepEqual(turnedOff(msg), {
    text: "rtdebug: rank 1: not set (AttributeError: 'DistributedDataParallel' object has no attribute 'module'); ranks 0,2 stop on nonfinite; turned off again in ranks 0,2 (every rank takes it, or none)",
    level: 'error',
    ok: [],
  });
  assert.match(
    turnedOff(msg, 'rank 2 did not stop').text,
    /; could not turn it off again in ranks 0,2 \(rank 2 did not stop\): they may wait for the others at the next step$/,
  );
});
