import { pyAscii, pyRepr, pySlice } from '../common/pyText';

/**
 * The `--stop-on COND[,COND...]` grammar, as harness/rtdebug/common/stopon.py parses it, so the command can
 * refuse a bad spec before it touches any rank, with the CLI's own one-line error. Pure.
 */
export const FORMS = 'nonfinite, nonfinite:deep, disagree, disagree:N, step=N';
export const DEFAULT_DISAGREE_EVERY = 100;

export interface StopOn {
  nonfinite: boolean;
  deep: boolean;
  disagreeEvery?: number;
  step?: number;
}

export class StopOnError extends Error {}

const DISAGREE = /^disagree(?::(\d{1,9}))?$/;
const STEP = /^step=(\d{1,12})$/;

/** Python's str.strip() (whitespace at both ends). */
const strip = (s: string) => s.replace(/^\s+|\s+$/gu, '');

/** `"nonfinite,step=5"` → StopOn; "" → off. Throws StopOnError with the CLI's line. */
export function parseStopOn(spec: string): StopOn {
  const out: StopOn = { nonfinite: false, deep: false };
  if (!strip(spec)) return out;
  for (const raw of spec.split(',')) {
    const cond = strip(raw);
    let m: RegExpExecArray | null;
    if (cond === 'nonfinite' || cond === 'nonfinite:deep') {
      out.nonfinite = true;
      out.deep = out.deep || cond.endsWith(':deep');
    } else if ((m = DISAGREE.exec(cond))) {
      // Python's `int(m.group(1) or 100)`: "disagree:0" is 0, refused below
      const every = Number(m[1] ?? DEFAULT_DISAGREE_EVERY);
      if (every < 1) throw new StopOnError(`--stop-on ${cond}: N must be at least 1`);
      out.disagreeEvery = every;
    } else if ((m = STEP.exec(cond))) {
      out.step = Number(m[1]);
    } else {
      throw new StopOnError(`--stop-on: unknown condition ${pyAscii(pySlice(cond, 40))}; the conditions are ${FORMS}`);
    }
  }
  return out;
}

export const isOn = (s: StopOn): boolean => s.nonfinite || s.disagreeEvery !== undefined || s.step !== undefined;

/** The canonical spelling (StopOn.text() in the harness): what the ranks answer with. */
export function stopOnText(s: StopOn): string {
  const parts = s.nonfinite ? [s.deep ? 'nonfinite:deep' : 'nonfinite'] : [];
  if (s.disagreeEvery !== undefined) parts.push(`disagree:${s.disagreeEvery}`);
  if (s.step !== undefined) parts.push(`step=${s.step}`);
  return parts.join(',');
}

/** The one-line error for a spec, or undefined when it parses (for an input box's validation). */
export function stopOnProblem(spec: string): string | undefined {
  try {
    parseStopOn(spec);
    return undefined;
  } catch (e) {
    return (e as Error).message;
  }
}

/** What the command evaluates in each rank (the harness's `arm.configure`); the spec goes in as a Python str literal. */
export function configureExpression(spec: string): string {
  return `__import__('rtdebug.rank.stopon.arm', fromlist=['_']).configure(${pyRepr(spec)})`;
}
