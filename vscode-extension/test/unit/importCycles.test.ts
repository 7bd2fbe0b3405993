import * as assert from 'assert';
import { spawnSync } from 'child_process';
import * as fs from 'fs';
import * as path from 'path';
import { test } from 'node:test';
import { EXT_ROOT, tmpDir } from './helpers';

/** The lint step that keeps import circles out (scripts/check-import-cycles.js), on circles made for it and on the extension. */
const SCRIPT = path.join(EXT_ROOT, 'scripts', 'check-import-cycles.js');
const check = (...args: string[]) => spawnSync(process.execPath, [SCRIPT, ...args], { encoding: 'utf8', cwd: EXT_ROOT });
const FAIL =
  'FAIL: import cycle(s); import only downwards (see the layers above scripts/check-import-cycles.js) or move the shared part down';

function write(root: string, files: Record<string, string>): void {
  for (const [name, text] of Object.entries(files)) {
    fs.mkdirSync(path.dirname(path.join(root, name)), { recursive: true });
    fs.writeFileSync(path.join(root, name), text);
  }
}

test('a circle through a type-only import is found and named', () => {
  const d = tmpDir();
  write(d, {
    'common/model.ts': "import { row } from '../view';\nexport interface M { a: number }\nexport const f = () => row;\n",
    'view.ts': "import type { M } from './common/model';\nexport const row = (m?: M) => m;\n",
    'leaf.ts': "import { f } from './common/model';\nexport const g = f;\n",
  });
  const r = check('--layers', d, d);
  assert.equal(r.status, 1);
  const rel = (p: string) => path.relative(EXT_ROOT, path.join(d, p));
  assert.deepEqual(r.stderr.trim().split('\n'), [
    `import cycle among 2 modules: ${rel('common/model.ts')}, ${rel('view.ts')}`,
    `  e.g. ${rel('common/model.ts')} → ${rel('view.ts')} → ${rel('common/model.ts')}`,
    FAIL,
  ]);
});

test('two feature folders that import each other are a circle too, with no file circle', () => {
  const d = tmpDir();
  write(d, {
    'ranks/view.ts': "import { step } from '../collectives/step';\nexport const view = step;\n",
    'ranks/pick.ts': 'export const pick = 1;\n',
    'collectives/step.ts': 'export const step = 2;\n',
    'collectives/commands.ts': "import { pick } from '../ranks/pick';\nexport const c = pick;\n",
    'common/text.ts': 'export const t = 3;\n',
  });
  const r = check('--layers', d, d);
  assert.equal(r.status, 1);
  const rel = (p: string) => path.relative(EXT_ROOT, path.join(d, p));
  assert.deepEqual(r.stderr.trim().split('\n'), [
    `folder cycle in ${path.relative(EXT_ROOT, d)}/: collectives → ranks → collectives`,
    `  ${rel('collectives/commands.ts')} imports ${rel('ranks/pick.ts')}`,
    `  ${rel('ranks/view.ts')} imports ${rel('collectives/step.ts')}`,
    FAIL,
  ]);
});

test('the extension has no import circle, and its src/ folders are layered', () => {
  const r = check();
  assert.equal(r.status, 0, r.stderr);
  assert.match(r.stdout, /^import cycles: none in src, test \(\d+ modules; src\/ folders layered\)\n$/);
});
