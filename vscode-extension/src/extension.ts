import * as vscode from 'vscode';
import { registerAll } from './init';

export function activate(context: vscode.ExtensionContext): void {
  registerAll(context);
}

export function deactivate(): void {
  // Everything is disposed through context.subscriptions.
}
