import * as vscode from 'vscode';
import { Gated, Views } from '../../common/constants';
import { adoptArgs, adoptPickItems, parseAdoptList } from './adoptModel';
import { HarnessCliError, runHarness } from '../../common/harnessCli';
import { currentHarness } from '../../common/harnessCommand';
import { RegistryWatcher } from '../../registry/registryWatcher';
import { ensureTrusted } from '../../common/workspaceTrust';

/**
 * "rtdebug: Adopt a Running Job…": the torchrun and Ray Train jobs of this user on this machine (`rtdebug
 * adopt --list --json`), a pick, then `rtdebug adopt PID` through the same CLI runner as every other call
 * (private empty cwd, trusted workspaces only); the adopted ranks then appear in the Ranks view. A refusal
 * is shown as the CLI's own one line. Returns the adopted pid (for keybindings and tests).
 */
export async function adoptRunningJob(registry: RegistryWatcher, log: vscode.OutputChannel): Promise<number | undefined> {
  if (!ensureTrusted(Gated.adopt)) return undefined;
  try {
    const harness = await currentHarness(Gated.adopt);
    const cands = parseAdoptList(await runHarness(harness, ['adopt', '--list', '--json'], 30000));
    if (!cands.length) {
      void vscode.window.showInformationMessage('rtdebug: no torchrun or Ray Train job of yours runs on this machine.');
      return undefined;
    }
    const pick = await vscode.window.showQuickPick(adoptPickItems(cands), {
      title: 'rtdebug: adopt which running job?',
      placeHolder: 'pid · kind · ranks · running time',
      matchOnDescription: true,
      matchOnDetail: true,
    });
    if (!pick) return undefined;
    log.appendLine(`rtdebug: adopting pid ${pick.pid}`);
    const out = await vscode.window.withProgress(
      { location: vscode.ProgressLocation.Notification, title: `rtdebug: adopting pid ${pick.pid}…` },
      () => runHarness(harness, adoptArgs(pick.pid), 120000),
    );
    log.append(out);
    await registry.refreshNow();
    await vscode.commands.executeCommand(`${Views.ranks}.focus`);
    void vscode.window.showInformationMessage(`rtdebug: adopted pid ${pick.pid}; its ranks are in the Ranks view.`);
    return pick.pid;
  } catch (e) {
    const msg = e instanceof HarnessCliError && e.line ? e.line : `rtdebug: ${(e as Error).message}`;
    log.appendLine(`rtdebug: adopt failed: ${(e as Error).message}`);
    void vscode.window.showErrorMessage(msg);
    return undefined;
  }
}
