import * as vscode from 'vscode';
import { Commands, DEBUG_TYPE } from './constants';
import { RtdebugAdapterFactory } from './adapterFactory';
import { AttachCommands } from './attachCommands';
import { AttachService } from './attachService';
import { RtdebugConfigurationProvider } from './debugProvider';
import { generateLaunchConfigurations } from './generateCommand';
import { resolvePython } from './interpreter';
import { RegistryWatcher } from './registryWatcher';
import { harnessEnv, readSettings } from './settings';
import { RankStatusBar } from './statusBar';

/** Every registration of the extension, in one place. */
export function registerAll(context: vscode.ExtensionContext): void {
  const registry = new RegistryWatcher();
  const attach = new AttachService(async () => {
    const folder = vscode.workspace.workspaceFolders?.[0];
    const s = readSettings(folder?.uri);
    return { python: await resolvePython(folder?.uri), module: s.harnessModule, cwd: folder?.uri.fsPath, env: harnessEnv(s) };
  });
  const commands = new AttachCommands(attach, registry);
  const provider = new RtdebugConfigurationProvider(attach);
  context.subscriptions.push(
    registry,
    attach,
    new RankStatusBar(registry, attach),
    vscode.commands.registerCommand(Commands.generateLaunchConfigurations, generateLaunchConfigurations),
    vscode.commands.registerCommand(Commands.attachToRank, (a) => commands.attachToRank(a)),
    vscode.commands.registerCommand(Commands.attachToAllRanks, (a) => commands.attachToAllRanks(a)),
    vscode.commands.registerCommand(Commands.showRanks, () => commands.attachToRank()),
    vscode.debug.registerDebugConfigurationProvider(DEBUG_TYPE, provider),
    vscode.debug.registerDebugConfigurationProvider(DEBUG_TYPE, provider, vscode.DebugConfigurationProviderTriggerKind.Dynamic),
    vscode.debug.registerDebugAdapterDescriptorFactory(DEBUG_TYPE, new RtdebugAdapterFactory(attach, registry)),
    vscode.window.registerUriHandler({ handleUri: (uri) => commands.handleUri(uri) }),
  );
}
