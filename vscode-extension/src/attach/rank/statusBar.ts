import * as vscode from 'vscode';
import { Commands } from '../../common/constants';
import { statusText } from './quickPickItems';
import { AttachService } from './attachService';
import { RegistryWatcher } from '../../registry/registryWatcher';

/** "rtdebug attached/live" in the status bar while any rtdebug rank is live; click → Attach to Rank…. */
export class RankStatusBar implements vscode.Disposable {
  private item = vscode.window.createStatusBarItem('rtdebug.ranks', vscode.StatusBarAlignment.Left, 50);
  private subs: vscode.Disposable[];

  constructor(
    private registry: RegistryWatcher,
    private attach: AttachService,
  ) {
    this.item.name = 'rtdebug ranks';
    this.item.command = Commands.attachToRank;
    this.subs = [registry.onDidChange(() => this.update()), attach.onDidChange(() => this.update())];
    this.update();
  }

  private update(): void {
    const t = statusText(this.registry.sessions, this.attach.attachedCount);
    if (!t) return this.item.hide();
    this.item.text = t.text;
    this.item.tooltip = t.tooltip;
    this.item.show();
  }

  dispose(): void {
    this.subs.forEach((d) => d.dispose());
    this.item.dispose();
  }
}
