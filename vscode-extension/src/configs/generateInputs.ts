import { GenerateOptions } from './generateCli';

/** Validation for the "Generate Launch Configurations" prompts (and for arguments passed to the command). */
export function validatePositiveInt(v: string, what: string): string | undefined {
  return /^\d+$/.test(v.trim()) && Number(v) >= 1 ? undefined : `${what} must be a whole number ≥ 1`;
}

export function validatePort(v: string): string | undefined {
  const n = Number(v);
  return /^\d+$/.test(v.trim()) && n >= 1 && n <= 65535 ? undefined : 'port base must be 1-65535';
}

export function validateHosts(v: string, nnodes: number): string | undefined {
  const hosts = splitHosts(v);
  if (nnodes > 1 && hosts.length !== nnodes) return `give ${nnodes} comma-separated hosts (one per node)`;
  return undefined;
}

export function splitHosts(v: string): string[] {
  return v
    .split(',')
    .map((h) => h.trim())
    .filter(Boolean);
}

/**
 * Checks options given as command arguments (tests, keybindings) the same way the prompts do; the wait
 * policy is the harness's to check (the prompt asks `rtdebug check --wait`; `rtdebug vscode` refuses one).
 */
export function checkGenerateOptions(o: Partial<GenerateOptions>): GenerateOptions {
  if (!o.script) throw new Error('script is required');
  const mode = o.mode ?? 'torchrun';
  if (mode !== 'run' && mode !== 'torchrun') throw new Error(`mode must be run or torchrun, not ${String(mode)}`);
  const errs = [
    o.nprocPerNode !== undefined ? validatePositiveInt(String(o.nprocPerNode), 'nproc per node') : undefined,
    o.nnodes !== undefined ? validatePositiveInt(String(o.nnodes), 'nnodes') : undefined,
    o.portBase !== undefined ? validatePort(String(o.portBase)) : undefined,
    o.nnodes && o.nnodes > 1 ? validateHosts((o.hosts ?? []).join(','), o.nnodes) : undefined,
  ].filter(Boolean);
  if (errs.length) throw new Error(errs.join('; '));
  return { ...o, script: o.script, mode } as GenerateOptions;
}
