import * as vscode from 'vscode';
import { CONFIG_SECTION, DEFAULT_HOST, DEFAULT_PORT_BASE, RESTRICTED_SETTINGS } from './constants';
import { settingValue } from './settingsRead';

/** Typed access to the `rtdebug.*` settings. */
export interface Settings {
  pythonPath: string;
  harnessModule: string;
  portBase: number;
  wait: string;
  host: string;
  readyTimeoutSeconds: number;
  registryDir: string;
  allStop: boolean;
  listing: string;
}

export function readSettings(scope?: vscode.ConfigurationScope): Settings {
  const c = vscode.workspace.getConfiguration(CONFIG_SECTION, scope);
  const trusted = vscode.workspace.isTrusted;
  const get = <T>(key: string, fallback: T): T =>
    settingValue<T>(c.inspect<T>(key), () => c.get<T>(key), fallback, trusted, (RESTRICTED_SETTINGS as readonly string[]).includes(key));
  return {
    pythonPath: get('pythonPath', ''),
    harnessModule: get('harnessModule', 'rtdebug') || 'rtdebug',
    portBase: get('portBase', DEFAULT_PORT_BASE),
    wait: get('wait', 'all') || 'all',
    host: get('host', DEFAULT_HOST) || DEFAULT_HOST,
    readyTimeoutSeconds: get('readyTimeoutSeconds', 180),
    registryDir: get('registryDir', ''),
    allStop: get('allStop', true),
    listing: get('listing', 'auto'),
  };
}

/** The environment for harness processes: the registry override travels as RTDEBUG_REGISTRY_DIR. */
export function harnessEnv(s: Settings): NodeJS.ProcessEnv {
  return s.registryDir ? { ...process.env, RTDEBUG_REGISTRY_DIR: s.registryDir } : { ...process.env };
}
