import * as assert from 'assert';
import { test } from 'node:test';
import { allStopExpression, JobAllStop } from '../../src/attach/allstop/jobAllStop';
import { RankKey } from '../../src/attach/allstop/rankDebugState';

/** Fake jobs: which rank got which evaluate; `says` is what each job's entries say (`all_stop`). */
function setup(attached: RankKey[], says: Record<string, boolean | undefined>) {
  const sent: string[] = [];
  const log: string[] = [];
  const setting = { on: true };
  let fail = false;
  const j = new JobAllStop(
    {
      request: async (k, command, args) => {
        if (fail) throw new Error('rank gone\nmore');
        sent.push(`${k.session}/${k.rank} ${command} ${JSON.stringify(args)}`);
        return { result: '' };
      },
      attached: (s) => attached.filter((k) => s === undefined || k.session === s),
      jobSays: (s) => says[s],
      log: (l) => log.push(l),
    },
    () => setting.on,
  );
  return { j, sent, log, setting, failNext: (f: boolean) => (fail = f) };
}

test('the expression names only rtdebug.rank.api.all_stop, with a Python bool', () => {
  assert.equal(allStopExpression(false), "__import__('rtdebug.rank.api', fromlist=['_']).all_stop(False)");
  assert.equal(allStopExpression(true), "__import__('rtdebug.rank.api', fromlist=['_']).all_stop(True)");
});

test('attach: the setting on leaves every job as it started; off tells a job whose ranks do all-stop, once', async () => {
  const a = { session: 'a', rank: 1 };
  const { j, sent, setting } = setup([a], { a: true, b: false });
  await j.attached(a);
  assert.deepEqual(sent, [], 'on (the default): a job started --no-all-stop stays off');
  setting.on = false;
  await j.attached(a);
  await j.attached({ session: 'a', rank: 0 });
  await j.attached({ session: 'b', rank: 0 }); // already off
  assert.deepEqual(sent, [`a/1 evaluate {"expression":"${allStopExpression(false).replace(/"/g, '\\"')}","context":"repl"}`]);
});

test('a change of the setting tells every attached job in one rank each; a failed evaluate is retried next time', async () => {
  const ks = [
    { session: 'a', rank: 0 },
    { session: 'a', rank: 1 },
    { session: 'b', rank: 2 },
  ];
  const { j, sent, log, setting, failNext } = setup(ks, {});
  setting.on = false;
  failNext(true);
  await j.changed();
  assert.deepEqual(sent, []);
  assert.ok(log.every((l) => l.startsWith('rtdebug: could not set all-stop in rank') && l.endsWith('rank gone')));
  failNext(false);
  await j.changed();
  assert.deepEqual(
    sent.map((s) => s.split(' ')[0]),
    ['a/0', 'b/2'],
  );
  assert.ok(
    sent.every((s) => s.includes('all_stop(False)') && !s.includes('frameId')),
    'no frame: the rank may run',
  );
  await j.changed();
  assert.equal(sent.length, 2, 'told already');
  setting.on = true;
  await j.changed();
  assert.deepEqual(
    sent.slice(2).map((s) => s.includes('all_stop(True)')),
    [true, true],
  );
  assert.ok(log.includes('rtdebug: all-stop on in job b (the rtdebug.allStop setting, set in rank 2)'));
});

test("attach: the rank's own session carries the evaluate (VS Code may not have announced it yet)", async () => {
  const a = { session: 'a', rank: 0 };
  const { j, sent, setting } = setup([], { a: true });
  setting.on = false;
  const via: string[] = [];
  await j.attached(a, async (command, args) => void via.push(`${command} ${String(args.expression)}`));
  assert.deepEqual(sent, []);
  assert.deepEqual(via, [`evaluate ${allStopExpression(false)}`]);
});
