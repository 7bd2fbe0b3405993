import * as vscode from 'vscode';
import { absoluteFrom } from './cliPaths';
import { HarnessCommand } from './harnessCli';
import { resolvePython } from './interpreter';
import { harnessEnv, readSettings } from './settings';
import { requireTrust } from './workspaceTrust';

/**
 * How to run the rtdebug CLI for a workspace folder (default: the first): interpreter, module, environment.
 * Only in a trusted workspace (throws the untrusted-workspace error naming `what`, before anything is
 * resolved). There is no cwd: runHarness runs the CLI in neutralCwd(), so a relative interpreter path is
 * made absolute against the folder here.
 */
export async function currentHarness(what: string, folder = vscode.workspace.workspaceFolders?.[0]): Promise<HarnessCommand> {
  requireTrust(what);
  const s = readSettings(folder?.uri);
  return { python: absoluteFrom(folder?.uri.fsPath, await resolvePython(folder?.uri)), module: s.harnessModule, env: harnessEnv(s) };
}
