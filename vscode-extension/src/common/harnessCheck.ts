import { HarnessCommand, runHarnessAnswer } from './harnessCli';

/**
 * Grammars and selectors are the harness's: the extension asks `rtdebug check … --json` whether a
 * `--stop-on` spec, a `--wait` policy or a rank selector is valid and what it means, and shows the CLI's own one-line refusal
 * when it is not (the user's text quoted as Python quotes it). It keeps no copy of either grammar.
 */
export type Checked<T> = ({ valid: true } & T) | { valid: false; error: string; dimensions?: string };

/** `check --stop-on SPEC --json`: `stop_on` is the canonical spelling the ranks are given ("" = off). */
export interface StopOnMeaning {
  stop_on: string;
  nonfinite: boolean;
  deep: boolean;
  disagree_every: number | null;
  step: number | null;
}

/** `check --wait POLICY --json`: the ranks a `--wait` policy names (`ranks` null: all, or mesh coordinates). */
export interface WaitMeaning {
  wait: string;
  form: 'ranks' | 'mesh';
  ranks: number[] | null;
}

/** `check --rank SEL [--session ID] --json`: `ranks` null when only a session could say (no --session). */
export interface RanksMeaning {
  rank: string;
  form: 'ranks' | 'mesh';
  ranks: number[] | null;
  session?: string;
  world_size?: number;
  /** The session's mesh dimensions as the refusals list them: `dp (0-1), tp (0-3)`. */
  dimensions?: string;
}

/** Runs `rtdebug check <args> --json` and returns its stdout (a refusal included: exit 2). */
export type CheckRun = (args: string[]) => Promise<string>;

export const checkWith =
  (cmd: HarnessCommand): CheckRun =>
  (args) =>
    runHarnessAnswer(cmd, ['check', ...args, '--json'], 30000);

function answer<T>(stdout: string): Checked<T> {
  let v: unknown;
  try {
    v = JSON.parse(stdout);
  } catch {
    throw new Error(`rtdebug check printed no JSON: ${stdout.slice(0, 120)}`);
  }
  const o = v as { valid?: unknown; error?: unknown };
  if (o.valid === true) return v as Checked<T>;
  if (o.valid === false && typeof o.error === 'string') return v as Checked<T>;
  throw new Error(`rtdebug check: unexpected answer ${stdout.slice(0, 120)}`);
}

/** Options are given as `--flag=value`, so a value that starts with "-" is still the value. */
export const checkStopOn = async (run: CheckRun, spec: string): Promise<Checked<StopOnMeaning>> =>
  answer<StopOnMeaning>(await run([`--stop-on=${spec}`]));

export const checkWait = async (run: CheckRun, policy: string): Promise<Checked<WaitMeaning>> =>
  answer<WaitMeaning>(await run([`--wait=${policy}`]));

/** The CLI's refusal of a value, or undefined when it takes it (an input box's validateInput). */
export async function refusal(check: Promise<Checked<object>>): Promise<string | undefined> {
  try {
    const c = await check;
    return c.valid ? undefined : c.error;
  } catch (e) {
    return (e as Error).message;
  }
}

export const checkRanks = async (run: CheckRun, selector: string, session?: string): Promise<Checked<RanksMeaning>> =>
  answer<RanksMeaning>(await run([`--rank=${selector}`, ...(session === undefined ? [] : ['--session', session])]));
