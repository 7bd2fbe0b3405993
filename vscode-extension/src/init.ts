import * as vscode from 'vscode';
import { Commands, ContextKeys, DEBUG_TYPE, EVAL_SCHEME, Gated, Views } from './common/constants';
import { rankForEndpoint } from './attach/rank/attachConfig';
import { RankDebugStates } from './attach/allstop/rankDebugState';
import { RtdebugAdapterFactory } from './attach/launch/adapterFactory';
import { adoptRunningJob } from './attach/adopt/adoptCommand';
import { AllStopController } from './attach/allstop/allStopController';
import { jobEntries } from './attach/allstop/continuePlan';
import { AttachCommands } from './attach/rank/attachCommands';
import { CollectiveCommands } from './collectives/collectiveCommands';
import { AttachService } from './attach/rank/attachService';
import { RtdebugConfigurationProvider } from './attach/launch/debugProvider';
import { EvalDocuments, EvaluateCommand } from './ranks/evaluateCommand';
import { generateLaunchConfigurations } from './configs/generateCommand';
import { currentHarness } from './common/harnessCommand';
import { RankCommands } from './ranks/rankCommands';
import { ranksViewMessage } from './ranks/ranksTree';
import { RanksView } from './ranks/ranksView';
import { RankTrackerFactory } from './attach/group/rankTracker';
import { RegistryWatcher } from './registry/registryWatcher';
import { readSettings } from './common/settings';
import { RankStatusBar } from './attach/rank/statusBar';
import { openFrame, StacksView } from './stacks/stacksView';
import { StopOnCommand } from './stopon/stopOnCommand';
import { groupByItems } from './ranks/rankGroups';

/** Every registration of the extension, in one place. */
export function registerAll(context: vscode.ExtensionContext): void {
  const log = vscode.window.createOutputChannel('rtdebug');
  const registry = new RegistryWatcher((line) => log.appendLine(line));
  const attach = new AttachService(
    () => currentHarness(Gated.attach),
    (ep) => rankForEndpoint(registry.sessions, ep),
  );
  const states = new RankDebugStates();
  const jobSays = (session: string): boolean | undefined =>
    registry.sessions.find((s) => s.entry.session_id === session)?.ranks.find((r) => typeof r.all_stop === 'boolean')?.all_stop;
  const entryPausing = (k: { session: string; rank: number }): boolean =>
    registry.sessions.find((s) => s.entry.session_id === k.session)?.ranks.find((r) => r.rank === k.rank)?.debug?.state === 'pausing';
  const jobNow = (session: string) => {
    const s = session ? registry.find(session) : undefined; // a fresh read of the files
    return s ? jobEntries(s.ranks) : undefined;
  };
  const allStop = new AllStopController(attach, states, log, jobSays, entryPausing, jobNow);
  const commands = new AttachCommands(attach, registry);
  const provider = new RtdebugConfigurationProvider(attach);
  const ranksView = new RanksView(registry, states, attach, context.workspaceState);
  const stacksView = new StacksView();
  const rankCommands = new RankCommands(attach, registry, stacksView, allStop, log);
  const collectives = new CollectiveCommands(attach, states, allStop, registry, rankCommands, log);
  registry.attachedHere = () => attach.attachedCount > 0;
  const evalDocs = new EvalDocuments();
  const evaluate = new EvaluateCommand(attach, states, evalDocs, rankCommands);
  const stopOn = new StopOnCommand(attach, states, allStop.allStop, registry, rankCommands, log);
  const ranksTree = vscode.window.createTreeView(Views.ranks, { treeDataProvider: ranksView, showCollapseAll: true });
  const groupBy = async () => {
    const pick = await vscode.window.showQuickPick(groupByItems(registry.sessions, ranksView.groupBy), {
      title: 'rtdebug: group the ranks by mesh dimension',
    });
    if (pick) ranksView.groupBy = pick.value;
  };
  const showViewMessage = () => {
    ranksTree.message = ranksViewMessage(registry.rootProblem, registry.skipped);
  };
  showViewMessage();
  const setAllStopKey = () => void vscode.commands.executeCommand('setContext', ContextKeys.allStop, readSettings().allStop);
  setAllStopKey();
  const reg = vscode.commands.registerCommand;
  context.subscriptions.push(
    registry,
    attach,
    log,
    allStop,
    ranksView,
    stacksView,
    collectives,
    new RankStatusBar(registry, attach),
    ranksTree,
    registry.onDidChange(showViewMessage),
    vscode.window.createTreeView(Views.stacks, { treeDataProvider: stacksView, showCollapseAll: true }),
    vscode.workspace.registerTextDocumentContentProvider(EVAL_SCHEME, evalDocs),
    vscode.workspace.onDidChangeConfiguration((e) => {
      if (e.affectsConfiguration('rtdebug.allStop')) setAllStopKey();
    }),
    reg(Commands.generateLaunchConfigurations, generateLaunchConfigurations),
    reg(Commands.attachToRank, (a) => commands.attachToRank(a)),
    reg(Commands.attachToAllRanks, (a) => commands.attachToAllRanks(a)),
    reg(Commands.showRanks, () => vscode.commands.executeCommand(`${Views.ranks}.focus`)),
    reg(Commands.refreshRanks, () => registry.refreshNow()),
    reg(Commands.attachRankItem, (n) => rankCommands.attachRank(n)),
    reg(Commands.detachRank, (n) => rankCommands.detachRank(n)),
    reg(Commands.stopSession, (n) => rankCommands.stopSession(n)),
    reg(Commands.showStacks, (n) => rankCommands.showStacks(n)),
    reg(Commands.pauseAll, (n) => rankCommands.pauseAll(n)),
    reg(Commands.continueAll, (n) => rankCommands.continueAll(n)),
    reg(Commands.evaluateAll, (a) => evaluate.run(a)),
    reg(Commands.openFrame, (file: string, line: number) => openFrame(file, line)),
    reg(Commands.attachGroup, (n) => rankCommands.attachGroup(n)),
    reg(Commands.adoptJob, () => adoptRunningJob(registry, log)),
    reg(Commands.stepAll, (n) => collectives.stepAll(n)),
    reg(Commands.runToCollective, (n) => collectives.runToNextCollective(n)),
    reg(Commands.attachCulprit, (n) => rankCommands.attachCulprit(n)),
    reg(Commands.stopAllRanksWhen, (a) => stopOn.run(a)),
    reg(Commands.attachToRanks, (a) => commands.attachToRanks(a)),
    reg(Commands.groupRanksBy, groupBy),
    reg(Commands.attachRankGroup, (n) =>
      n?.kind === 'group'
        ? commands.attachToAllRanks({ session: n.session.entry.session_id, ranks: n.group.ranks.map((r: { rank: number }) => r.rank) })
        : undefined,
    ),
    vscode.debug.registerDebugAdapterTrackerFactory(
      '*',
      new RankTrackerFactory(
        attach,
        states,
        allStop.allStop,
        (l) => log.appendLine(l),
        (k, s) => void allStop.job.attached(k, async (command, args) => s.customRequest(command, args)),
      ),
    ),
    vscode.debug.registerDebugConfigurationProvider(DEBUG_TYPE, provider),
    vscode.debug.registerDebugConfigurationProvider(DEBUG_TYPE, provider, vscode.DebugConfigurationProviderTriggerKind.Dynamic),
    vscode.debug.registerDebugAdapterDescriptorFactory(DEBUG_TYPE, new RtdebugAdapterFactory(attach, registry)),
    vscode.window.registerUriHandler({ handleUri: (uri) => commands.handleUri(uri) }),
  );
}
