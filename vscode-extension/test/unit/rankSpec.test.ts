import * as assert from 'assert';
import { test } from 'node:test';
import { checkWait, checkWith, refusal } from '../../src/common/harnessCheck';
import { checkGenerateOptions, validateHosts, validatePort, validatePositiveInt } from '../../src/configs/generateInputs';
import { harnessPython } from './helpers';

const py = harnessPython();

test("wait policies and rank lists are the harness's: rtdebug check --wait", { skip: !py && 'no harness venv' }, async () => {
  const run = checkWith({ python: py!, module: 'rtdebug' });
  const ranks = async (policy: string) => {
    const w = await checkWait(run, policy);
    assert.ok(w.valid, JSON.stringify(w));
    return w.ranks;
  };
  assert.deepEqual(await ranks('none'), []);
  assert.deepEqual(await ranks('all'), null);
  assert.deepEqual(await ranks('0,2-3'), [0, 2, 3]);
  assert.deepEqual(await ranks(' 3, 1 ,1-2 '), [1, 2, 3]);
  for (const bad of ['3-1', 'first', '-1'])
    assert.equal(await refusal(checkWait(run, bad)), `invalid --wait value '${bad}': use none, all, or ranks like 0,2-3`);
  assert.equal(await refusal(checkWait(run, 'all')), undefined);
  assert.equal(await refusal(checkWait(run, 'tp=1')), undefined, 'mesh coordinates: the job resolves them');
  assert.equal(await refusal(checkWait(run, 'tp=x')), "--wait 'tp=x': 'tp=x' is not DIM=N, DIM=*, DIM=A:B or DIM=(A,B,...)");
  // the CLI missing is one sentence too, never a thrown validator
  assert.match(
    (await refusal(checkWait(checkWith({ python: '/nonexistent/python', module: 'rtdebug' }), 'all'))) ?? '',
    /Python interpreter not found/,
  );
});

test('prompt validators', () => {
  assert.equal(validatePositiveInt('2', 'n'), undefined);
  assert.match(validatePositiveInt('0', 'nproc') ?? '', /nproc/);
  assert.match(validatePositiveInt('x', 'n') ?? '', /whole number/);
  assert.equal(validatePort('5678'), undefined);
  assert.ok(validatePort('70000'));
  assert.equal(validateHosts('a,b', 2), undefined);
  assert.match(validateHosts('a', 2) ?? '', /give 2/);
});

test('command arguments are checked like the prompts', () => {
  assert.deepEqual(checkGenerateOptions({ script: 'a.py' }), { script: 'a.py', mode: 'torchrun' });
  assert.throws(() => checkGenerateOptions({}), /script is required/);
  assert.throws(() => checkGenerateOptions({ script: 'a.py', mode: 'x' as 'run' }), /mode/);
  assert.throws(
    () => checkGenerateOptions({ script: 'a.py', nprocPerNode: 0, wait: 'bad' }),
    /^Error: nproc per node must be a whole number ≥ 1$/,
  );
  assert.throws(() => checkGenerateOptions({ script: 'a.py', nnodes: 2, hosts: ['h1'] }), /give 2/);
});
