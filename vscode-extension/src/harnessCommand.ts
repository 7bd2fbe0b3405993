import * as vscode from 'vscode';
import { HarnessCommand } from './common/harnessCli';
import { resolvePython } from './interpreter';
import { harnessEnv, readSettings } from './settings';

/** How to run the harness CLI for the first workspace folder: interpreter, module, cwd, environment. */
export async function currentHarness(): Promise<HarnessCommand> {
  const folder = vscode.workspace.workspaceFolders?.[0];
  const s = readSettings(folder?.uri);
  return { python: await resolvePython(folder?.uri), module: s.harnessModule, cwd: folder?.uri.fsPath, env: harnessEnv(s) };
}
