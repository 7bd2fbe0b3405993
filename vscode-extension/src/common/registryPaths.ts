import * as os from 'os';
import * as path from 'path';

/**
 * The registry directory, by the same rule as the harness: an explicit override (the extension setting),
 * else $RTDEBUG_REGISTRY_DIR, else $XDG_RUNTIME_DIR/rtdebug, else ~/.rtdebug/registry.
 */
export function registryDir(env: NodeJS.ProcessEnv = process.env, home = os.homedir(), override = ''): string {
  if (override) return override;
  if (env.RTDEBUG_REGISTRY_DIR) return env.RTDEBUG_REGISTRY_DIR;
  if (env.XDG_RUNTIME_DIR) return path.join(env.XDG_RUNTIME_DIR, 'rtdebug');
  return path.join(home, '.rtdebug', 'registry');
}
