import * as assert from 'assert';
import * as fs from 'fs';
import * as path from 'path';
import { test } from 'node:test';
import { RESTRICTED_SETTINGS } from '../../src/common/constants';
import { settingValue } from '../../src/common/settingsRead';
import { EXT_ROOT } from './helpers';

const pkg = JSON.parse(fs.readFileSync(path.join(EXT_ROOT, 'package.json'), 'utf8'));

test('untrusted workspace: a restricted setting takes only the user value or the default', () => {
  const inspected = { defaultValue: '', globalValue: '/home/u/venv/bin/python', workspaceValue: './evil.sh' };
  const get = () => './evil.sh';
  assert.equal(settingValue(inspected, get, '', false, true), '/home/u/venv/bin/python');
  assert.equal(
    settingValue({ defaultValue: 'rtdebug', workspaceValue: 'evil' }, () => 'evil', 'rtdebug', false, true),
    'rtdebug',
  );
  assert.equal(
    settingValue(undefined, () => 'evil', 'fallback', false, true),
    'fallback',
  );
});

test('trusted workspace, or a harmless setting: the usual precedence (get())', () => {
  assert.equal(
    settingValue({ globalValue: '/u/py', workspaceValue: './ws-py' }, () => './ws-py', '', true, true),
    './ws-py',
  );
  assert.equal(
    settingValue({ workspaceValue: 6000 }, () => 6000, 5678, false, false),
    6000,
  );
  assert.equal(
    settingValue({}, () => undefined, 5678, true, false),
    5678,
  );
});

test('package.json: the settings that choose what runs are machine-overridable and restricted in untrusted workspaces', () => {
  const props = pkg.contributes.configuration.properties;
  const restricted: string[] = pkg.capabilities.untrustedWorkspaces.restrictedConfigurations;
  assert.equal(pkg.capabilities.untrustedWorkspaces.supported, 'limited');
  assert.deepEqual([...restricted].sort(), RESTRICTED_SETTINGS.map((k) => `rtdebug.${k}`).sort());
  for (const k of restricted) assert.equal(props[k]?.scope, 'machine-overridable', k);
});

test('package.json: every view action is a declared command; the Ranks view has a welcome text', () => {
  const ids = new Set(pkg.contributes.commands.map((c: { command: string }) => c.command));
  for (const items of Object.values(pkg.contributes.menus) as { command: string }[][])
    for (const m of items) assert.ok(ids.has(m.command), m.command);
  assert.deepEqual(
    pkg.contributes.views.debug.map((v: { id: string }) => v.id),
    ['rtdebug.ranks', 'rtdebug.stacks'],
  );
  assert.match(pkg.contributes.viewsWelcome[0].contents, /rtdebug torchrun/);
  assert.equal(pkg.contributes.configuration.properties['rtdebug.allStop'].default, true);
});
