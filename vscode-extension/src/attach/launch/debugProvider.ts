import * as fs from 'fs';
import * as path from 'path';
import * as vscode from 'vscode';
import { DEBUG_TYPE, ENTRY_PREFIX, Gated } from '../../common/constants';
import { rankEndpoint } from '../rank/attachConfig';
import { absoluteFrom } from '../../common/cliPaths';
import { checkInstalled, HarnessCliError, HarnessCommand, runHarness } from '../../common/harnessCli';
import { CapsuleInfo, parseCapsuleInfo, rankProblem, scriptNote } from './replayModel';
import { AttachDeclinedError } from '../rank/remoteAttach';
import { trustGate } from '../../common/trustGate';
import { AttachService } from '../rank/attachService';
import { resolvePython } from '../../common/interpreter';
import { harnessEnv, readSettings } from '../../common/settings';
import { workspaceTrusted } from '../../common/workspaceTrust';

/**
 * Resolves `"type": "rtdebug"` configurations before VS Code starts them: fills defaults from the settings,
 * resolves the interpreter, and turns the common mistakes (missing script, harness not installed) into an
 * error message instead of a session, so nothing is started that would then be orphaned. Everything but a
 * plain `connect` to one rank needs Python (the CLI, or the job), so it needs a trusted workspace.
 */
export class RtdebugConfigurationProvider implements vscode.DebugConfigurationProvider {
  constructor(private attach: AttachService) {}

  provideDebugConfigurations(): vscode.DebugConfiguration[] {
    return [
      {
        type: DEBUG_TYPE,
        request: 'launch',
        name: `${ENTRY_PREFIX}torchrun current file`,
        mode: 'torchrun',
        script: '${file}',
        nprocPerNode: 2,
      },
      { type: DEBUG_TYPE, request: 'attach', name: `${ENTRY_PREFIX}attach all ranks` },
    ];
  }

  resolveDebugConfiguration(
    _folder: vscode.WorkspaceFolder | undefined,
    config: vscode.DebugConfiguration,
  ): vscode.DebugConfiguration | undefined {
    if (!config.type && !config.request && !config.name) {
      const doc = vscode.window.activeTextEditor?.document;
      if (doc?.languageId !== 'python') {
        void vscode.window.showErrorMessage('rtdebug: open a Python training script, or add an rtdebug configuration to launch.json.');
        return undefined;
      }
      return {
        type: DEBUG_TYPE,
        request: 'launch',
        name: `${ENTRY_PREFIX}torchrun ${path.basename(doc.fileName)}`,
        mode: 'torchrun',
        script: doc.fileName,
        nprocPerNode: 2,
      };
    }
    return config;
  }

  async resolveDebugConfigurationWithSubstitutedVariables(
    folder: vscode.WorkspaceFolder | undefined,
    config: vscode.DebugConfiguration,
  ): Promise<vscode.DebugConfiguration | undefined> {
    if (rankEndpoint(config)) return config; // one rank: nothing to start, no Python
    const untrusted = trustGate(workspaceTrusted(), config.request === 'launch' ? Gated.launch : Gated.attach);
    if (untrusted) return fail(untrusted);
    if (config.request === 'attach' && config.rank !== undefined && config.rank !== '') {
      // "rtdebug: attach to rank…" (generated with "rank": "${input:rtdebugRank}"): one rank from the registry.
      const rank = Number(String(config.rank).trim());
      if (!Number.isInteger(rank) || rank < 0) return fail(`"${config.rank}" is not a rank number.`);
      try {
        return {
          ...(await this.attach.configFor(config.session, rank)),
          ...(config.justMyCode !== undefined ? { justMyCode: config.justMyCode } : {}),
        };
      } catch (e) {
        return e instanceof AttachDeclinedError ? undefined : fail((e as Error).message);
      }
    }
    const s = readSettings(folder?.uri);
    config.portBase ??= s.portBase;
    config.wait ??= s.wait;
    config.host ??= s.host;
    config.readyTimeoutSeconds ??= s.readyTimeoutSeconds;
    // absolute: the installed-check runs in the neutral cwd, not in the folder a relative path meant
    config.python = absoluteFrom(folder?.uri.fsPath, await resolvePython(folder?.uri, config.python));
    config.harnessModule ??= s.harnessModule;
    if (config.request !== 'launch') return config;
    const cwd = config.cwd ?? folder?.uri.fsPath ?? (config.script ? path.dirname(config.script) : process.cwd());
    config.cwd = cwd;
    if (config.mode === 'replay')
      return resolveReplay(config, cwd, { python: config.python, module: config.harnessModule, env: harnessEnv(s) });
    if (!config.script) return fail('the configuration has no "script" to run.');
    const script = path.resolve(cwd, config.script);
    if (!fs.existsSync(script)) return fail(`script not found: ${script}`);
    config.script = script;
    try {
      await checkInstalled({ python: config.python, module: config.harnessModule, env: harnessEnv(s) });
    } catch (e) {
      return fail((e as Error).message);
    }
    return config;
  }
}

/**
 * `"mode": "replay"`: the capsule and rank checked by the harness itself (`rtdebug capsule DIR --json`), so a
 * damaged capsule, a rank out of range or not captured is one message before anything starts.
 */
async function resolveReplay(
  config: vscode.DebugConfiguration,
  cwd: string,
  cli: HarnessCommand,
): Promise<vscode.DebugConfiguration | undefined> {
  if (!config.capsule) return fail('a replay configuration needs "capsule": the folder --capture wrote.');
  config.capsule = path.resolve(cwd, String(config.capsule));
  if (config.script) {
    config.script = path.resolve(cwd, String(config.script));
    if (!fs.existsSync(config.script)) return fail(`script not found: ${config.script}`);
  }
  let info: CapsuleInfo;
  try {
    await checkInstalled(cli);
    info = parseCapsuleInfo(await runHarness(cli, ['capsule', config.capsule, '--json']));
  } catch (e) {
    return fail(e instanceof HarnessCliError && e.line ? e.line.replace(/^rtdebug: (error: )?/, '') : (e as Error).message);
  }
  const problem = rankProblem(info, config.rank);
  if (problem) return fail(problem);
  config.rank = Number(config.rank);
  const note = config.script ? undefined : scriptNote(info);
  if (note) void vscode.window.showWarningMessage(`rtdebug: ${note}`);
  return config;
}

function fail(msg: string): undefined {
  void vscode.window.showErrorMessage(`rtdebug: ${msg}`);
  return undefined;
}
