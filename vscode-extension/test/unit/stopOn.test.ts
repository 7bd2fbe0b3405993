import * as assert from 'assert';
import { test } from 'node:test';
import { fromPyRepr, pyAscii, pyPrintable, pyRepr } from '../../src/common/pyText';
import { answersMessage, mustTurnOff, turnedOff } from '../../src/stopon/stopOnAnswers';
import { configureExpression, FORMS, parseStopOn, stopOnProblem, stopOnText } from '../../src/stopon/stopOnSpec';

/** "Stop All Ranks When…": the --stop-on grammar and words of harness/rtdebug/common/stopon.py, and the answers message. */
const canon = (spec: string) => stopOnText(parseStopOn(spec));

test('the conditions parse as the CLI parses them, to its canonical spelling', () => {
  assert.equal(canon('nonfinite'), 'nonfinite');
  assert.equal(canon('nonfinite:deep'), 'nonfinite:deep');
  assert.equal(canon('nonfinite,nonfinite:deep'), 'nonfinite:deep');
  assert.equal(canon('disagree'), 'disagree:100');
  assert.equal(canon('disagree:5'), 'disagree:5');
  assert.equal(canon('disagree:007'), 'disagree:7');
  assert.equal(canon(' nonfinite , step=1 '), 'nonfinite,step=1');
  assert.equal(canon('step=0,disagree:3,nonfinite:deep'), 'nonfinite:deep,disagree:3,step=0');
  assert.equal(canon(''), '');
  assert.equal(canon('  '), '');
});

test('a bad condition is the CLI line, its text as Python ascii() quotes it (40 characters at most)', () => {
  const line = (x: string) => `--stop-on: unknown condition ${x}; the conditions are ${FORMS}`;
  assert.equal(FORMS, 'nonfinite, nonfinite:deep, disagree, disagree:N, step=N');
  assert.equal(stopOnProblem('nan'), line("'nan'"));
  assert.equal(stopOnProblem('nonfinite,'), line("''"));
  assert.equal(stopOnProblem('Nonfinite'), line("'Nonfinite'"));
  assert.equal(stopOnProblem('step=x'), line("'step=x'"));
  assert.equal(stopOnProblem('disagree:1234567890'), line("'disagree:1234567890'"));
  assert.equal(stopOnProblem('x'.repeat(60)), line(`'${'x'.repeat(40)}'`));
  assert.equal(stopOnProblem(`é'"`), line(`'\\xe9\\'"'`));
  assert.equal(stopOnProblem('bad\tcond'), line("'bad\\tcond'"));
  assert.equal(stopOnProblem("a'b"), line(`"a'b"`));
  assert.equal(stopOnProblem('☃'), line("'\\u2603'"));
  assert.equal(stopOnProblem('disagree:0'), '--stop-on disagree:0: N must be at least 1');
  assert.equal(stopOnProblem('nonfinite,step=3'), undefined);
});

test('what each rank evaluates: the harness arm.configure with the spec as a Python literal', () => {
  assert.equal(
    configureExpression('nonfinite,step=5'),
    "__import__('rtdebug.rank.stopon.arm', fromlist=['_']).configure('nonfinite,step=5')",
  );
  assert.equal(configureExpression(''), "__import__('rtdebug.rank.stopon.arm', fromlist=['_']).configure('')");
});

test("Python's repr/ascii of a str, and debugpy's str answers read back", () => {
  assert.equal(pyRepr("a'b"), `"a'b"`);
  assert.equal(pyRepr(`a'"b`), `'a\\'"b'`);
  assert.equal(pyRepr('é☃\u00a0\x7f'), "'é☃\\xa0\\x7f'");
  assert.equal(pyAscii('é☃\u{1F600}'), "'\\xe9\\u2603\\U0001f600'");
  assert.equal(pyPrintable('a\nb\u00a0c d'), 'a?b?c d');
  assert.equal(fromPyRepr("'rtdebug: rank 0 stops on nonfinite'"), 'rtdebug: rank 0 stops on nonfinite');
  assert.equal(fromPyRepr(`"it's"`), "it's");
  assert.equal(fromPyRepr("'a\\'b\\n\\xe9\\u2603\\\\'"), "a'b\né☃\\");
  for (const s of ["a'b", 'x"y', 'é☃\u{1F600}\t\\']) assert.equal(fromPyRepr(pyRepr(s)), s);
  assert.equal(fromPyRepr('42'), '42');
  assert.equal(fromPyRepr("'a' + 'b'"), "'a' + 'b'");
});

test('answers: ranks that said the same are one phrase; what went wrong comes first, with why', () => {
  const ok = (rank: number, spec = 'nonfinite') => ({ rank, result: `'rtdebug: rank ${rank} stops on ${spec}'` });
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
  const refused = answersMessage([{ rank: 0, result: "'rtdebug: --stop-on: unknown condition \\'x\\'; the conditions are …'" }]);
  assert.equal(refused.text, "rtdebug: rank 0: --stop-on: unknown condition 'x'; the conditions are …");
  assert.equal(refused.level, 'error');
  assert.equal(answersMessage([{ rank: 0, result: "'rtdebug: rank 0: --stop-on is off'" }]).text, 'rtdebug: rank 0: --stop-on is off');
  // a forged or garbled answer stays one line
  assert.equal(answersMessage([{ rank: 0, result: 'line one\nline two' }]).text, 'rtdebug: rank 0: line one?line two');
  assert.equal(answersMessage([]).text, 'rtdebug: no rank is attached here');
  // 1024 ranks that agree: one short line
  const many = answersMessage(Array.from({ length: 1024 }, (_, r) => ok(r)));
  assert.equal(many.text, 'rtdebug: ranks 0-1023 stop on nonfinite');
});

test('every rank takes it, or none: the ranks that did are turned off again, and the message says so', () => {
  const msg = answersMessage([
    { rank: 0, result: "'rtdebug: rank 0 stops on nonfinite'" },
    { rank: 1, error: "AttributeError: 'DistributedDataParallel' object has no attribute 'module'" },
    { rank: 2, result: "'rtdebug: rank 2 stops on nonfinite'" },
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
