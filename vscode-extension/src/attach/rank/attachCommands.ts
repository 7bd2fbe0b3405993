import * as vscode from 'vscode';
import { DEBUG_TYPE, ENTRY_PREFIX, Gated } from '../../common/constants';
import { parseAttachUri } from './attachUri';
import { implicitSession, rankPickItems, sessionPickItems } from './quickPickItems';
import { AttachDeclinedError } from './remoteAttach';
import { AttachService } from './attachService';
import { chooseRanks, selectorPreview, selectorPrompt } from './rankSelector';
import { checkWith } from '../../common/harnessCheck';
import { currentHarness } from '../../common/harnessCommand';
import { RegistryWatcher } from '../../registry/registryWatcher';
import { ensureTrusted } from '../../common/workspaceTrust';
import { ranksWord } from '../../common/rankList';

/**
 * "Attach to Rank…", "Attach to All Ranks" and the vscode://rtdebug.rtdebug-vscode/attach URI. Attaching
 * asks the CLI for the rank's configuration (`attach --json`), so each needs a trusted workspace.
 */
export class AttachCommands {
  constructor(
    private attach: AttachService,
    private registry: RegistryWatcher,
  ) {}

  /** args (optional, e.g. from a keybinding or the URI handler): { session?: string, rank?: number } */
  async attachToRank(args?: { session?: string; rank?: number }): Promise<void> {
    if (!ensureTrusted(Gated.attach)) return;
    let session = args?.session;
    let rank = args?.rank;
    if (rank === undefined) {
      const items = rankPickItems(this.registry.refresh().filter((s) => !session || s.entry.session_id === session));
      if (!items.length)
        return void vscode.window.showWarningMessage(
          `rtdebug: no live ranks in ${this.registry.dir}. Start a job with \`rtdebug torchrun …\` first.`,
        );
      const pick = await vscode.window.showQuickPick(items, {
        title: 'rtdebug: attach to rank',
        placeHolder: 'rank · host:port · state',
        matchOnDetail: true,
      });
      if (!pick) return;
      session = pick.session;
      rank = pick.rank;
    }
    await this.run(() => this.attach.attach(session, Number(rank)));
  }

  /** One parent session for the whole rtdebug session; it attaches every ready rank, now and later. */
  async attachToAllRanks(args?: { session?: string; ranks?: number[] }): Promise<void> {
    if (!ensureTrusted(Gated.attach)) return;
    let session = args?.session;
    if (!session) {
      const sessions = this.registry.refresh();
      if (!sessions.length)
        return void vscode.window.showWarningMessage(
          `rtdebug: no live rtdebug session in ${this.registry.dir}. Start a job with \`rtdebug torchrun …\` first.`,
        );
      session = implicitSession(sessions)?.entry.session_id;
      if (!session) {
        // several, or only an unverified one: the user chooses
        const pick = await vscode.window.showQuickPick(sessionPickItems(sessions), { title: 'rtdebug: attach to all ranks of…' });
        if (!pick) return;
        session = pick.label;
      }
    }
    const folder = vscode.workspace.workspaceFolders?.[0];
    await this.run(async () => {
      const ok = await vscode.debug.startDebugging(folder, {
        type: DEBUG_TYPE,
        request: 'attach',
        name: `${ENTRY_PREFIX}${args?.ranks ? `${ranksWord(args.ranks)}` : 'all ranks'} (${session})`,
        session,
        ranks: args?.ranks,
      });
      if (!ok) throw new Error('VS Code did not start the debug session');
    });
  }

  /**
   * "Attach to Ranks…": the ranks a selector chooses — rank numbers (`0,2-3`) or mesh coordinates (`tp=0`,
   * `dp=0,tp=*`) — attached under one parent session, as Attach to All Ranks does. args (keybindings,
   * tests): { session?, selector? }. The CLI checks the selector (`rtdebug check --rank`): a bad one is its
   * one line, in the input box while typing.
   */
  async attachToRanks(args?: { session?: string; selector?: string }): Promise<number[] | undefined> {
    if (!ensureTrusted(Gated.attach)) return undefined;
    const sessions = this.registry.refresh();
    let id = args?.session ?? implicitSession(sessions)?.entry.session_id;
    if (!id) {
      if (!sessions.length)
        return void vscode.window.showWarningMessage(
          `rtdebug: no live rtdebug session in ${this.registry.dir}. Start a job with \`rtdebug torchrun …\` first.`,
        );
      id = (await vscode.window.showQuickPick(sessionPickItems(sessions), { title: 'rtdebug: attach to ranks of…' }))?.label;
      if (!id) return undefined;
    }
    const sid = id;
    if (!this.registry.sessions.some((s) => s.entry.session_id === sid))
      return void vscode.window.showErrorMessage(`rtdebug: no live rtdebug session "${sid}"`);
    let ranks: number[];
    try {
      const check = checkWith(await currentHarness(Gated.attach));
      const text =
        args?.selector ??
        (await vscode.window.showInputBox({
          title: `rtdebug: attach to ranks of ${sid}`,
          prompt: await selectorPrompt(check, sid),
          placeHolder: '0,2-3 or tp=0 or dp=0,tp=*',
          ignoreFocusOut: true,
          validateInput: async (v) => {
            if (!v.trim()) return undefined;
            const p = await selectorPreview(check, v, sid);
            return {
              message: p.message,
              severity: p.ok ? vscode.InputBoxValidationSeverity.Info : vscode.InputBoxValidationSeverity.Error,
            };
          },
        }));
      if (!text?.trim()) return undefined;
      ranks = await chooseRanks(check, text, sid);
    } catch (e) {
      return void vscode.window.showErrorMessage(`rtdebug: ${(e as Error).message}`);
    }
    await this.attachToAllRanks({ session: sid, ranks });
    return ranks;
  }

  async handleUri(uri: vscode.Uri): Promise<void> {
    let req;
    try {
      req = parseAttachUri(uri.path, uri.query);
    } catch (e) {
      return void vscode.window.showErrorMessage(`rtdebug: ${(e as Error).message} in ${uri.toString()}`);
    }
    return req.kind === 'all'
      ? this.attachToAllRanks({ session: req.session })
      : this.attachToRank({ session: req.session, rank: req.rank });
  }

  private async run(f: () => Promise<void>): Promise<void> {
    try {
      await f();
    } catch (e) {
      if (e instanceof AttachDeclinedError) return; // the user said no to the host: nothing to report
      void vscode.window.showErrorMessage(`rtdebug: ${(e as Error).message}`);
    }
  }
}
