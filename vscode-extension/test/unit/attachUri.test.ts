import * as assert from 'assert';
import { test } from 'node:test';
import { parseAttachUri } from '../../src/attach/rank/attachUri';

test('the vscode:// link that `rtdebug attach --vscode` opens', () => {
  assert.deepEqual(parseAttachUri('/attach', 'session=20261202-1-ab&rank=3'), { kind: 'rank', session: '20261202-1-ab', rank: 3 });
  assert.deepEqual(parseAttachUri('/attach', 'rank=0'), { kind: 'rank', session: undefined, rank: 0 });
  assert.deepEqual(parseAttachUri('/attach', 'session=s1'), { kind: 'all', session: 's1' });
  assert.deepEqual(parseAttachUri('attach', 'session=s1&rank=all'), { kind: 'all', session: 's1' });
});

test('bad links are refused with a reason', () => {
  assert.throws(() => parseAttachUri('/open', 'rank=1'), /unknown rtdebug link path/);
  assert.throws(() => parseAttachUri('/attach', 'rank=-1'), /bad rank "-1"/);
  assert.throws(() => parseAttachUri('/attach', 'session=../x&rank=1'), /bad session id/);
});
