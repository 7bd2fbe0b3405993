import { execFile, ExecFileOptions } from 'child_process';
import { neutralCwd } from './cliPaths';
import { FlagCache, rejectedFlag, VERSION_PROBE } from './pythonFlags';

/**
 * Runs `<python> -m <module> <args>` and turns its failures into one clear sentence. `line`: the CLI's own
 * one-line refusal (`rtdebug: …` on stderr) when it printed one, for messages that show just that.
 */
export class HarnessCliError extends Error {
  constructor(
    message: string,
    readonly line?: string,
  ) {
    super(message);
  }
}

/** The CLI's one-line refusal in its stderr (the last `rtdebug: …` line), if any. */
export function cliLine(stderr: string): string | undefined {
  const lines = stderr
    .split('\n')
    .map((l) => l.trim())
    .filter((l) => l.startsWith('rtdebug:'));
  return lines[lines.length - 1];
}

/**
 * How to run the CLI. There is deliberately no cwd: every CLI process runs in neutralCwd(), never in the
 * workspace (whose own `rtdebug/` would be imported first). Paths the user wrote relative to the
 * workspace are made absolute before they get here (cliPaths.absoluteFrom).
 */
export interface HarnessCommand {
  python: string;
  module: string;
  env?: NodeJS.ProcessEnv;
}

/** The options of every CLI process: the neutral cwd, the harness environment, a timeout. */
export function cliExecOptions(cmd: HarnessCommand, timeoutMs: number): ExecFileOptions & { cwd: string } {
  return { cwd: neutralCwd(), env: cmd.env ?? process.env, timeout: timeoutMs, maxBuffer: 8 << 20 };
}

/** `-P` where the interpreter has it (pythonFlags.ts): probed once per interpreter, in the neutral cwd. */
export const interpreterFlags = new FlagCache(
  (python) =>
    new Promise((resolve, reject) => {
      execFile(python, VERSION_PROBE, { cwd: neutralCwd(), env: process.env, timeout: 15000, encoding: 'utf8' }, (err, out) =>
        err ? reject(err) : resolve(out),
      );
    }),
);

/** Runs `<python> <flags> <argv>` in the neutral cwd; an interpreter that rejects a flag is run again without. */
function execCli(
  cmd: HarnessCommand,
  argv: string[],
  timeoutMs: number,
  cache = interpreterFlags,
): Promise<{ err: ExecError | null; stdout: string; stderr: string }> {
  const once = (flags: string[]) =>
    new Promise<{ err: ExecError | null; stdout: string; stderr: string }>((resolve) => {
      execFile(cmd.python, [...flags, ...argv], { ...cliExecOptions(cmd, timeoutMs), encoding: 'utf8' }, (err, stdout, stderr) =>
        resolve({ err, stdout, stderr }),
      );
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

/**
 * Runs `<python> -m <module> <args>` whose answer is on stdout even when it refuses: exit 2 with output (a
 * usage refusal `check --json` also prints as JSON) is an answer too; anything else fails as runHarness does.
 */
export async function runHarnessAnswer(cmd: HarnessCommand, args: string[], timeoutMs = 60000): Promise<string> {
  const { err, stdout, stderr } = await execCli(cmd, ['-m', cmd.module, ...args], timeoutMs);
  if (err && !(err.code === 2 && stdout.trim()))
    throw new HarnessCliError(describeFailure(cmd, args, err, stderr), err.killed ? undefined : cliLine(stderr));
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
  const lines = stderr
    .trim()
    .split('\n')
    .filter((l) => l.trim());
  const msg = lines.find((l) => l.startsWith('rtdebug:')) ?? lines[lines.length - 1] ?? err.message;
  return `${what} failed: ${msg.trim()}`;
}
