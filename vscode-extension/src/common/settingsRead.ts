/**
 * The one read path for `rtdebug.*` settings. Settings that choose what runs (the interpreter, the harness
 * module, the registry whose pids `stop` acts on) are taken from a workspace only when it is trusted:
 * otherwise a cloned repo's `.vscode/settings.json` could make the extension run a program of its choosing.
 * VS Code already hides restricted workspace values in Restricted Mode (package.json
 * `capabilities.untrustedWorkspaces.restrictedConfigurations`); this is the same rule, enforced here too.
 */
export interface Inspected<T> {
  defaultValue?: T;
  globalValue?: T;
  workspaceValue?: T;
  workspaceFolderValue?: T;
}

/** Read one setting: `get()` when the workspace is trusted or the key is harmless, else user/default only. */
export function settingValue<T>(
  inspected: Inspected<T> | undefined,
  get: () => T | undefined,
  fallback: T,
  trusted: boolean,
  restricted: boolean,
): T {
  if (trusted || !restricted) return get() ?? fallback;
  return inspected?.globalValue ?? inspected?.defaultValue ?? fallback;
}
