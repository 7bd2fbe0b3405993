import * as vscode from 'vscode';
import { HarnessCliError, runHarness } from '../common/harnessCli';
import { currentHarness } from '../common/harnessCommand';
import { ensureTrusted } from '../common/workspaceTrust';
import { parseCapsuleInfo, rankPicks, replayConfiguration } from '../attach/launch/replayModel';

export const COMMAND = 'rtdebug.replayRank';
const WHAT = 'Replay a Rank…';

/**
 * "rtdebug: Replay a Rank…": pick a capsule (the folder `--capture DIR` wrote), ask the harness what it holds
 * (`rtdebug capsule DIR --json`: a damaged capsule is the CLI's own one line), pick one of its captured ranks,
 * then F5 a `"mode": "replay"` configuration: `rtdebug replay DIR --rank R` as one process, attached when
 * ready. Trusted workspaces only (the replay runs the job's script). Returns the rank started (for tests).
 */
export async function replayRank(folder = vscode.workspace.workspaceFolders?.[0]): Promise<number | undefined> {
  if (!ensureTrusted(WHAT)) return undefined;
  const picked = await vscode.window.showOpenDialog({
    canSelectFolders: true,
    canSelectFiles: false,
    canSelectMany: false,
    defaultUri: folder?.uri,
    openLabel: 'Replay from this capsule',
    title: 'rtdebug: the capsule to replay (the folder --capture wrote)',
  });
  if (!picked?.length) return undefined;
  const dir = picked[0].fsPath;
  try {
    const harness = await currentHarness(WHAT, folder);
    const info = parseCapsuleInfo(await runHarness(harness, ['capsule', dir, '--json'], 60000));
    if (!info.ranks.length) {
      void vscode.window.showErrorMessage(`rtdebug: ${dir} holds no captured rank.`);
      return undefined;
    }
    const pick = await vscode.window.showQuickPick(rankPicks(info), {
      title: `rtdebug: replay which rank of ${info.worldSize}?`,
      placeHolder: 'the rank runs alone, its collectives answered from the capsule',
    });
    if (!pick) return undefined;
    await vscode.debug.startDebugging(folder, replayConfiguration(dir, pick.rank) as vscode.DebugConfiguration);
    return pick.rank;
  } catch (e) {
    void vscode.window.showErrorMessage(e instanceof HarnessCliError && e.line ? e.line : `rtdebug: ${(e as Error).message}`);
    return undefined;
  }
}

export function registerReplay(context: vscode.ExtensionContext): void {
  context.subscriptions.push(vscode.commands.registerCommand(COMMAND, () => replayRank()));
}
