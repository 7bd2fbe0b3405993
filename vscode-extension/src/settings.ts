import * as vscode from 'vscode';
import { CONFIG_SECTION, DEFAULT_HOST, DEFAULT_PORT_BASE } from './constants';

/** Typed access to the `rtdebug.*` settings. */
export interface Settings {
  pythonPath: string; harnessModule: string; portBase: number; wait: string; host: string;
  readyTimeoutSeconds: number; registryDir: string;
}

export function readSettings(scope?: vscode.ConfigurationScope): Settings {
  const c = vscode.workspace.getConfiguration(CONFIG_SECTION, scope);
  return {
    pythonPath: c.get<string>('pythonPath', ''),
    harnessModule: c.get<string>('harnessModule', 'harness') || 'harness',
    portBase: c.get<number>('portBase', DEFAULT_PORT_BASE),
    wait: c.get<string>('wait', 'all') || 'all',
    host: c.get<string>('host', DEFAULT_HOST) || DEFAULT_HOST,
    readyTimeoutSeconds: c.get<number>('readyTimeoutSeconds', 180),
    registryDir: c.get<string>('registryDir', ''),
  };
}

/** The environment for harness processes: the registry override travels as RTDEBUG_REGISTRY_DIR. */
export function harnessEnv(s: Settings): NodeJS.ProcessEnv {
  return s.registryDir ? { ...process.env, RTDEBUG_REGISTRY_DIR: s.registryDir } : { ...process.env };
}
