/** Command ids, debug types and other names shared by the extension and package.json. */
export const EXTENSION_ID = 'rtdebug.rtdebug-vscode';
export const DEBUG_TYPE = 'rtdebug';
export const DEBUGPY_TYPE = 'debugpy';
export const DEBUGPY_EXTENSION_ID = 'ms-python.debugpy';
export const PYTHON_EXTENSION_ID = 'ms-python.python';
export const CONFIG_SECTION = 'rtdebug';
/** Every entry the harness generates is named with this prefix; re-running replaces those entries. */
export const ENTRY_PREFIX = 'rtdebug: ';

export const Commands = {
  generateLaunchConfigurations: 'rtdebug.generateLaunchConfigurations',
  attachToRank: 'rtdebug.attachToRank',
  attachToAllRanks: 'rtdebug.attachToAllRanks',
  showRanks: 'rtdebug.showRanks',
} as const;

/** Lines the harness prints (its background-task problemMatcher uses the same ones). */
// torchrun prints "rtdebug: session <ID> starting …", run prints "rtdebug: session <ID>: debug endpoint …".
export const SESSION_STARTING_RE = /^rtdebug: session ([A-Za-z0-9_.-]+)(?: starting|:)/;
export const ALL_READY_RE = /^rtdebug: all (\d+) local ranks ready \(session (\S+)\)/;

export const DEFAULT_PORT_BASE = 5678;
export const DEFAULT_HOST = '127.0.0.1';
export const REGISTRY_POLL_MS = 1000;
