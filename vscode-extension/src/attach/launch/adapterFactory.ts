import * as vscode from 'vscode';
import { Gated } from '../../common/constants';
import { rankEndpoint } from '../rank/attachConfig';
import { GroupAdapter } from '../group/groupAdapter';
import { JobProcess, JobSpec } from './jobProcess';
import { replayOptions } from './replayModel';
import { RankGroup } from '../group/rankGroup';
import { checkWait, checkWith } from '../../common/harnessCheck';
import { currentHarness } from '../../common/harnessCommand';
import { AttachService } from '../rank/attachService';
import { RegistryWatcher } from '../../registry/registryWatcher';
import { harnessEnv, readSettings } from '../../common/settings';
import { requireTrust } from '../../common/workspaceTrust';

/**
 * Debug adapters for `"type": "rtdebug"`:
 * - a single-rank config (`connect` host/port) → DebugAdapterServer(port, host): the rank's debugpy endpoint
 *   speaks DAP itself, so this works without the Python Debugger extension (VSCodium, code-server);
 * - anything else is an "all ranks" parent session → an inline GroupAdapter driving a RankGroup.
 */
export class RtdebugAdapterFactory implements vscode.DebugAdapterDescriptorFactory {
  constructor(
    private attach: AttachService,
    private registry: RegistryWatcher,
  ) {}

  async createDebugAdapterDescriptor(session: vscode.DebugSession): Promise<vscode.DebugAdapterDescriptor> {
    const c = session.configuration;
    const ep = rankEndpoint(c);
    if (ep) return new vscode.DebugAdapterServer(ep.port, ep.host);
    const ranks = await ranksOf(c);
    const holder: { adapter?: GroupAdapter } = {}; // the group logs through the adapter created below
    const log = (line: string) => holder.adapter?.output(line + '\n');
    const group = new RankGroup(
      {
        readSession: (id) => this.registry.find(id),
        // the user's own job: it runs in the workspace (its cwd), so only in a trusted one
        startJob:
          c.request === 'launch'
            ? () => {
                requireTrust(Gated.launch);
                return new JobProcess(jobSpec(c), log);
              }
            : undefined,
        attach: (sid, rank) => this.attach.attach(sid, rank.rank, session),
        detachAll: (terminate) => this.attach.detachChildren(session, terminate),
        log,
      },
      {
        session: c.session,
        ranks,
        readyTimeoutMs: Number(c.readyTimeoutSeconds ?? 180) * 1000,
      },
    );
    holder.adapter = new GroupAdapter(group, (m) => void vscode.window.showErrorMessage(m));
    return new vscode.DebugAdapterInlineImplementation(holder.adapter as unknown as vscode.DebugAdapter);
  }
}

/** The config's `ranks`: a list, or a rank list the harness reads as it reads `--wait` (`0,2-3`); undefined: all. */
async function ranksOf(c: vscode.DebugConfiguration): Promise<number[] | undefined> {
  if (c.mode === 'replay') return [Number(c.rank)]; // a replay is one rank: the captured rank it runs
  if (Array.isArray(c.ranks)) return c.ranks.map(Number);
  if (typeof c.ranks !== 'string' || c.ranks.trim() === 'all') return undefined;
  const w = await checkWait(checkWith(await currentHarness(Gated.attach)), c.ranks);
  if (!w.valid) throw new Error(`"ranks": ${w.error}`);
  if (w.form === 'mesh') throw new Error(`"ranks": ${c.ranks}: rank numbers here (0,2-3); mesh coordinates: Attach to Ranks…`);
  return w.ranks ?? undefined;
}

function jobSpec(c: vscode.DebugConfiguration): JobSpec {
  const s = readSettings();
  return {
    python: c.python,
    module: c.harnessModule ?? s.harnessModule,
    mode: c.mode === 'run' || c.mode === 'replay' ? c.mode : 'torchrun',
    script: c.script,
    args: (c.args ?? []).map(String),
    cwd: c.cwd,
    env: { ...harnessEnv(s), ...(c.env ?? {}) },
    portBase: Number(c.portBase ?? s.portBase),
    host: c.host ?? s.host,
    wait: String(c.wait ?? s.wait),
    nprocPerNode: c.nprocPerNode === undefined ? undefined : Number(c.nprocPerNode),
    torchrunArgs: (c.torchrunArgs ?? []).map(String),
    allStop: s.allStop,
    replay: c.mode === 'replay' ? replayOptions(c) : undefined,
  };
}
