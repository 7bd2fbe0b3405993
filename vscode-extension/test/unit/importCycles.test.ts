import * as assert from 'assert';
import { spawnSync } from 'child_process';
import * as fs from 'fs';
import * as path from 'path';
import { test } from 'node:test';
import { EXT_ROOT, tmpDir } from './helpers';

/** The lint step that keeps import circles out (scripts/check-import-cycles.js), on a circle made for it and on the extension. */
const SCRIPT = path.join(EXT_ROOT, 'scripts', 'check-import-cycles.js');
const check = (...dirs: string[]) => spawnSync(process.execPath, [SCRIPT, ...dirs], { encoding: 'utf8', cwd: EXT_ROOT });

test('a circle through a type-only import is found and named', () => {
  const d = tmpDir();
  fs.mkdirSync(path.join(d, 'common'));
  fs.writeFileSync(path.join(d, 'common', 'model.ts'), "import { row } from '../view';\nexport interface M { a: number }\nexport const f = () => row;\n");
  fs.writeFileSync(path.join(d, 'view.ts'), "import type { M } from './common/model';\nexport const row = (m?: M) => m;\n");
  fs.writeFileSync(path.join(d, 'leaf.ts'), "import { f } from './common/model';\nexport const g = f;\n");
  const r = check(d);
  assert.equal(r.status, 1);
  const rel = (p: string) => path.relative(EXT_ROOT, path.join(d, p));
  assert.deepEqual(r.stderr.trim().split('\n'), [
    `import cycle among 2 modules: ${rel('common/model.ts')}, ${rel('view.ts')}`,
    `  e.g. ${rel('common/model.ts')} → ${rel('view.ts')} → ${rel('common/model.ts')}`,
    'FAIL: 1 import cycle(s); layer the modules (common/ never imports the VS Code glue) or move the shared part down',
  ]);
});

test('the extension has no import circle', () => {
  const r = check();
  assert.equal(r.status, 0, r.stderr);
  assert.match(r.stdout, /^import cycles: none in src, test \(\d+ modules\)\n$/);
});
