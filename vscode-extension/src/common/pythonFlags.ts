/**
 * Interpreter flags for rtdebug CLI processes (never for the user's own F5 job, which needs its script's
 * directory on sys.path). `-P` (Python >= 3.11) keeps the cwd and a script's directory off sys.path: with the
 * neutral cwd (cliPaths.ts) it is the second lock against running a module the workspace planted. `-I` is
 * not used: it would also drop PYTHONPATH and user site-packages, where the harness may be installed.
 *
 * Whether an interpreter has `-P` is learned once per interpreter path from one
 * `python -c "import sys; print(...)"` run (in the neutral cwd), and cached; a probe that fails (interpreter
 * missing, broken) means no flag, so the real call reports the failure in its own words.
 */
export const VERSION_PROBE = ['-c', 'import sys; print("%d.%d" % sys.version_info[:2])'];

/** "3.12\n" → [3, 12]; anything else → undefined. */
export function parseVersion(out: string): [number, number] | undefined {
  const m = /^\s*(\d+)\.(\d+)\s*$/.exec(out);
  return m ? [Number(m[1]), Number(m[2])] : undefined;
}

/** The flags a CLI call gets on this interpreter version: `-P` from 3.11 on. */
export function cliFlags(version: [number, number] | undefined): string[] {
  if (!version) return [];
  const [major, minor] = version;
  return major > 3 || (major === 3 && minor >= 11) ? ['-P'] : [];
}

/** Python's answer when it lacks a flag we passed ("Unknown option: -P"): drop the cached flags and retry. */
export function rejectedFlag(stderr: string): boolean {
  return /^unknown option:? -P\b/im.test(stderr);
}

/**
 * Flags per interpreter, probed at most once each (concurrent callers share the probe). `probe(python)`
 * resolves to the stdout of `python ${VERSION_PROBE}` and rejects when it fails.
 */
export class FlagCache {
  private cache = new Map<string, Promise<string[]>>();
  constructor(private probe: (python: string) => Promise<string>) {}

  flags(python: string): Promise<string[]> {
    let f = this.cache.get(python);
    if (!f) {
      // a failed probe is not cached: the interpreter may be installed or fixed by the next call
      f = this.probe(python).then(
        (out) => cliFlags(parseVersion(out)),
        () => {
          this.cache.delete(python);
          return [];
        },
      );
      this.cache.set(python, f);
    }
    return f;
  }

  /** Forget one interpreter (it rejected a flag: replaced by an older Python at the same path). */
  forget(python: string): void {
    this.cache.delete(python);
  }
}
