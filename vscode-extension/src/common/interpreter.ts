import * as vscode from 'vscode';
import { PYTHON_EXTENSION_ID } from './constants';
import { readSettings } from './settings';

/**
 * The Python interpreter for harness commands: an explicit "python" in the debug config, else the Python
 * extension's selected interpreter (when that extension is installed), else the `rtdebug.pythonPath`
 * setting, else `python3`.
 */
export async function resolvePython(resource?: vscode.Uri, explicit?: string): Promise<string> {
  if (explicit) return explicit;
  const fromExt = await pythonExtensionInterpreter(resource);
  if (fromExt) return fromExt;
  return readSettings(resource).pythonPath || 'python3';
}

async function pythonExtensionInterpreter(resource?: vscode.Uri): Promise<string | undefined> {
  if (!vscode.extensions.getExtension(PYTHON_EXTENSION_ID)) return undefined;
  try {
    const { PythonExtension } = await import('@vscode/python-extension');
    const api = await PythonExtension.api();
    const env = api.environments.getActiveEnvironmentPath(resource);
    const resolved = await api.environments.resolveEnvironment(env);
    return resolved?.executable.uri?.fsPath ?? env.path;
  } catch {
    return undefined;
  }
}
