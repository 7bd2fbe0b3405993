import * as assert from 'assert';
import { test } from 'node:test';
import { isWaitPolicy, parseRankList, portForRank, RankSpecError } from '../../src/attach/launch/rankSpec';
import { checkGenerateOptions, validateHosts, validatePort, validatePositiveInt, validateWait } from '../../src/configs/generateInputs';

test('port rule: base + global rank', () => {
  assert.equal(portForRank(5678, 0), 5678);
  assert.equal(portForRank(5678, 3), 5681);
  assert.equal(portForRank(6000, 15), 6015);
  assert.throws(() => portForRank(65535, 1), RankSpecError);
});

test('rank lists as the harness writes them', () => {
  assert.deepEqual(parseRankList('none'), []);
  assert.deepEqual(parseRankList('all', 3), [0, 1, 2]);
  assert.deepEqual(parseRankList('0,2-3'), [0, 2, 3]);
  assert.deepEqual(parseRankList(' 3, 1 ,1-2 '), [1, 2, 3]);
  assert.throws(() => parseRankList('all'), /world size/);
  assert.throws(() => parseRankList('3-1'), /bad rank range/);
  assert.throws(() => parseRankList('a'), /bad rank list/);
  assert.ok(isWaitPolicy('all') && isWaitPolicy('none') && isWaitPolicy('0,2-3'));
  assert.ok(!isWaitPolicy('some'));
});

test('prompt validators', () => {
  assert.equal(validatePositiveInt('2', 'n'), undefined);
  assert.match(validatePositiveInt('0', 'nproc') ?? '', /nproc/);
  assert.match(validatePositiveInt('x', 'n') ?? '', /whole number/);
  assert.equal(validatePort('5678'), undefined);
  assert.ok(validatePort('70000'));
  assert.equal(validateWait('0,2-3'), undefined);
  assert.ok(validateWait('first'));
  assert.equal(validateHosts('a,b', 2), undefined);
  assert.match(validateHosts('a', 2) ?? '', /give 2/);
});

test('command arguments are checked like the prompts', () => {
  assert.deepEqual(checkGenerateOptions({ script: 'a.py' }), { script: 'a.py', mode: 'torchrun' });
  assert.throws(() => checkGenerateOptions({}), /script is required/);
  assert.throws(() => checkGenerateOptions({ script: 'a.py', mode: 'x' as 'run' }), /mode/);
  assert.throws(() => checkGenerateOptions({ script: 'a.py', nprocPerNode: 0, wait: 'bad' }), /nproc per node.*wait policy/);
  assert.throws(() => checkGenerateOptions({ script: 'a.py', nnodes: 2, hosts: ['h1'] }), /give 2/);
});
