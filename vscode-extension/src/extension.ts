import * as vscode from 'vscode';
import { registerAll } from './init';
import { registerConnect } from './connect/connectCommand';
import { registerReplay } from './replay/replayCommand';

export function activate(context: vscode.ExtensionContext): void {
  registerAll(context);
  const connectLog = vscode.window.createOutputChannel('rtdebug connect');
  context.subscriptions.push(connectLog);
  registerConnect(context, connectLog);
  registerReplay(context);
}

export function deactivate(): void {
  // Everything is disposed through context.subscriptions.
}
