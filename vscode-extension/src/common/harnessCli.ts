import { execFile, ExecFileOptions } from 'child_process';
import { neutralCwd } from './cliPaths';
import { GeneratedConfigs, parseGenerated } from './launchFiles';
import { FlagCache, rejectedFlag, VERSION_PROBE } from './pythonFlags';

/**
 * Runs `<python> -m <module> <args>` and turns its failures into one clear sentence. `line`: the CLI's own
 * one-line refusal (`rtdebug: …` on stderr) when it printed one, for messages that show just that.
 */
export class HarnessCliError extends Error {
  constructor(message: string, readonly line?: string) { super(message); }
}

/** The CLI's one-line refusal in its stderr (the last `rtdebug: …` line), if any. */
export function cliLine(stderr: string): string | undefined {
  const lines = stderr.split('\n').map((l) => l.trim()).filter((l) => l.startsWith('rtdebug:'));
  return lines[lines.length - 1];
}

/**
 * How to run the CLI. There is deliberately no cwd: every CLI process runs in neutralCwd(), never in the
 * workspace (whose own `rtdebug/` would be imported first). Paths the user wrote relative to the
 * workspace are made absolute before they get here (cliPaths.absoluteFrom).
 */
export interface HarnessCommand { python: string; module: string; env?: NodeJS.ProcessEnv }

export interface GenerateOptions {
  script: string; mode: 'run' | 'torchrun'; nprocPerNode?: number; nnodes?: number; hosts?: string[];
  portBase?: number; wait?: string; python?: string;
}

/**
 * What `attach --json` prints. `verified`: false for a remote entry no job secret here verifies; `local`:
 * whether the host is this machine (both absent from older harnesses: see common/remoteAttach.ts).
 */
export interface AttachInfo {
  session_id: string; rank: number; host: string; port: number; configuration: Record<string, unknown>;
  verified?: boolean; local?: boolean;
}

/** The options of every CLI process: the neutral cwd, the harness environment, a timeout. */
export function cliExecOptions(cmd: HarnessCommand, timeoutMs: number): ExecFileOptions & { cwd: string } {
  return { cwd: neutralCwd(), env: cmd.env ?? process.env, timeout: timeoutMs, maxBuffer: 8 << 20 };
}

/** `-P` where the interpreter has it (pythonFlags.ts): probed once per interpreter, in the neutral cwd. */
export const interpreterFlags = new FlagCache((python) => new Promise((resolve, reject) => {
  execFile(python, VERSION_PROBE, { cwd: neutralCwd(), env: process.env, timeout: 15000, encoding: 'utf8' }, (err, out) => (err ? reject(err) : resolve(out)));
}));

/** Runs `<python> <flags> <argv>` in the neutral cwd; an interpreter that rejects a flag is run again without. */
function execCli(cmd: HarnessCommand, argv: string[], timeoutMs: number, cache = interpreterFlags): Promise<{ err: ExecError | null; stdout: string; stderr: string }> {
  const once = (flags: string[]) => new Promise<{ err: ExecError | null; stdout: string; stderr: string }>((resolve) => {
    execFile(cmd.python, [...flags, ...argv], { ...cliExecOptions(cmd, timeoutMs), encoding: 'utf8' }, (err, stdout, stderr) => resolve({ err, stdout, stderr }));
  });
  return cache.flags(cmd.python).then(async (flags) => {
    const r = await once(flags);
    if (!r.err || !flags.length || !rejectedFlag(r.stderr)) return r;
    cache.forget(cmd.python);
    return once([]);
  });
}

type ExecError = { code?: string | number | null; killed?: boolean; message: string };

export async function runHarness(cmd: HarnessCommand, args: string[], timeoutMs = 60000): Promise<string> {
  const { err, stdout, stderr } = await execCli(cmd, ['-m', cmd.module, ...args], timeoutMs);
  if (err) throw new HarnessCliError(describeFailure(cmd, args, err, stderr), err.killed ? undefined : cliLine(stderr));
  return stdout;
}

/** Fails with a clear message unless `python` can import the module (`python -c "import <module>"`). */
export async function checkInstalled(cmd: HarnessCommand): Promise<void> {
  const { err, stderr } = await execCli(cmd, ['-c', `import ${cmd.module}`], 30000);
  if (err) throw new HarnessCliError(describeFailure(cmd, [], err, stderr));
}

export function describeFailure(cmd: HarnessCommand, args: string[], err: ExecError, stderr: string): string {
  const what = `${cmd.python} -m ${cmd.module} ${args[0] ?? ''}`.trim();
  if (err.code === 'ENOENT') return `Python interpreter not found: ${cmd.python}. Set "rtdebug.pythonPath" or select an interpreter.`;
  if (/No module named/.test(stderr) && stderr.includes(cmd.module)) {
    return `The rtdebug harness is not installed in ${cmd.python} (no module "${cmd.module}"). Install it with: ${cmd.python} -m pip install -e <rtdebug checkout>`;
  }
  if (err.killed) return `${what} timed out`;
  const lines = stderr.trim().split('\n').filter((l) => l.trim());
  const msg = lines.find((l) => l.startsWith('rtdebug:')) ?? lines[lines.length - 1] ?? err.message;
  return `${what} failed: ${msg.trim()}`;
}

/**
 * `vscode` flags. The script is passed as the user gave it (relative to the workspace, as the prompt lists
 * it): the CLI never resolves it, it only writes it into the entries, which run with
 * `"cwd": "${workspaceFolder}"`; so the CLI's own cwd does not change what it prints.
 */
export function generateArgs(o: GenerateOptions): string[] {
  const a = ['vscode', '--script', o.script, '--mode', o.mode];
  if (o.mode === 'torchrun') {
    if (o.nprocPerNode !== undefined) a.push('--nproc-per-node', String(o.nprocPerNode));
    if (o.nnodes !== undefined) a.push('--nnodes', String(o.nnodes));
    if (o.hosts?.length) a.push('--hosts', o.hosts.join(','));
  }
  if (o.portBase !== undefined) a.push('--port-base', String(o.portBase));
  if (o.wait) a.push('--wait', o.wait);
  if (o.python) a.push('--python', o.python);
  a.push('--json');
  return a;
}

export async function generateConfigs(cmd: HarnessCommand, o: GenerateOptions): Promise<GeneratedConfigs> {
  return parseGenerated(await runHarness(cmd, generateArgs(o)));
}

export function attachArgs(rank: number, session?: string, timeoutS?: number): string[] {
  const a = ['attach', '--rank', String(rank)];
  if (session) a.push('--session', session);
  if (timeoutS !== undefined) a.push('--timeout', String(timeoutS));
  a.push('--json');
  return a;
}

export async function attachInfo(cmd: HarnessCommand, rank: number, session?: string, timeoutS = 10): Promise<AttachInfo> {
  const out = await runHarness(cmd, attachArgs(rank, session, timeoutS), (timeoutS + 30) * 1000);
  let v: AttachInfo;
  try { v = JSON.parse(out); } catch { throw new HarnessCliError(`attach printed no JSON: ${out.slice(0, 200)}`); }
  if (typeof v.port !== 'number' || typeof v.configuration !== 'object') throw new HarnessCliError('attach --json: missing port/configuration');
  return v;
}
