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
  refreshRanks: 'rtdebug.ranks.refresh',
  attachRankItem: 'rtdebug.ranks.attach',
  detachRank: 'rtdebug.ranks.detach',
  stopSession: 'rtdebug.ranks.stopSession',
  showStacks: 'rtdebug.showStacks',
  pauseAll: 'rtdebug.pauseAllRanks',
  continueAll: 'rtdebug.continueAllRanks',
  evaluateAll: 'rtdebug.evaluateInAllRanks',
  openFrame: 'rtdebug.stacks.openFrame',
  attachGroup: 'rtdebug.stacks.attachRank',
  adoptJob: 'rtdebug.adoptRunningJob',
  stepAll: 'rtdebug.stepAllRanks',
  runToCollective: 'rtdebug.runAllRanksToNextCollective',
  attachCulprit: 'rtdebug.stacks.attachCulprit',
  stopAllRanksWhen: 'rtdebug.stopAllRanksWhen',
  attachToRanks: 'rtdebug.attachToRanks',
  groupRanksBy: 'rtdebug.ranks.groupBy',
  attachRankGroup: 'rtdebug.ranks.attachGroup',
} as const;

/** Views contributed to the Run and Debug container (package.json `views.debug`). */
export const Views = { ranks: 'rtdebug.ranks', stacks: 'rtdebug.stacks' } as const;
/** Context keys used in package.json `when` clauses. */
export const ContextKeys = { hasStacks: 'rtdebug.hasStacks', allStop: 'rtdebug.allStopOn' } as const;
/** URI scheme of the read-only "Evaluate in All Ranks" documents. */
export const EVAL_SCHEME = 'rtdebug-eval';

/** What each trust-gated action is called in the untrusted-workspace message (common/trustGate.ts). */
export const Gated = {
  attach: 'Attaching to a rank',
  stop: 'Stop Session',
  stacks: 'Show Stacks',
  generate: 'Generate Launch Configurations',
  launch: 'Starting a job (F5)',
  listing: "Listing other nodes' ranks (rtdebug ps)",
  blocked: 'Locating a blocked rank (rtdebug stacks)',
  adopt: 'Adopt a Running Job',
  stopOn: 'Stop All Ranks When…',
} as const;

/** Settings that choose what runs: machine-overridable and never read from an untrusted workspace. */
export const RESTRICTED_SETTINGS = ['pythonPath', 'harnessModule', 'registryDir', 'listing'] as const;

/** Lines the harness prints (its background-task problemMatcher uses the same ones). */
// torchrun prints "rtdebug: session <ID> starting …", run prints "rtdebug: session <ID>: debug endpoint …".
export const SESSION_STARTING_RE = /^rtdebug: session ([A-Za-z0-9_.-]+)(?: starting|:)/;
export const ALL_READY_RE = /^rtdebug: all (\d+) local ranks ready \(session (\S+)\)/;

export const DEFAULT_PORT_BASE = 5678;
export const DEFAULT_HOST = '127.0.0.1';
export const REGISTRY_POLL_MS = 1000;
/** `rtdebug ps --json` starts a Python process: poll it less often than the files. */
export const CLI_POLL_MS = 5000;
/** A paused rank that has not stopped after this long is shown as blocked (and its stack is fetched). */
export const BLOCKED_AFTER_MS = 1500;
/** While a rank is paused (or waits in a collective) the Ranks view re-renders its time-left text this often. */
export const LIVE_ROWS_MS = 2000;
/** After ranks stop, their collective positions are re-read (`rtdebug ps --json`) after this pause. */
export const POSITIONS_DEBOUNCE_MS = 700;
