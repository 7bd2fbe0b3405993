import { RankKey } from './rankDebugState';

/** What a rank evaluates to set its whole job's all-stop (the harness's `rtdebug.rank.api.all_stop`). */
export function allStopExpression(on: boolean): string {
  return `__import__('rtdebug.rank.api', fromlist=['_']).all_stop(${on ? 'True' : 'False'})`;
}

/** One DAP request to one rank's debug session. */
export type Request = (command: string, args: Record<string, unknown>) => Promise<unknown>;

export interface JobAllStopDeps {
  /** One DAP request to a rank's debug session. */
  request(k: RankKey, command: string, args: Record<string, unknown>): Promise<unknown>;
  /** Attached ranks of a session (every session when undefined). */
  attached(session?: string): RankKey[];
  /** What the job's rank entries say (`all_stop`), undefined when they do not say. */
  jobSays(session: string): boolean | undefined;
  log(line: string): void;
}

/**
 * Hands the `rtdebug.allStop` setting to the ranks, which do all-stop themselves (on by default in every job).
 * A job started off (`--no-all-stop`) stays off unless the user changes the setting; a job whose ranks do it
 * while the setting is off is told when a rank of it is attached; a change of the setting tells every job
 * attached here. One `evaluate` with no frame in one rank of the job (it needs no stopped thread: pydevd runs
 * it as the rank runs); the job's ranks share the setting.
 */
export class JobAllStop {
  /** Per job: what this window told it last. */
  private told = new Map<string, boolean>();

  constructor(
    private deps: JobAllStopDeps,
    private setting: () => boolean,
  ) {}

  /**
   * A rank of `k.session` was attached (`via`: its debug session, which VS Code may not have announced yet): with the
   * setting off, a job whose ranks do all-stop is told.
   */
  async attached(k: RankKey, via?: Request): Promise<void> {
    if (this.setting() || this.told.get(k.session) === false || this.deps.jobSays(k.session) === false) return;
    await this.tell(k, false, via);
  }

  /** The setting changed: every job with a rank attached here is told, in one rank each. */
  async changed(): Promise<void> {
    const on = this.setting();
    const first = new Map<string, RankKey>();
    for (const k of this.deps.attached()) if (!first.has(k.session)) first.set(k.session, k);
    await Promise.all([...first.values()].filter((k) => this.told.get(k.session) !== on).map((k) => this.tell(k, on)));
  }

  /** Set the job's all-stop through rank `k`; false when the rank did not take it (logged). */
  async tell(k: RankKey, on: boolean, via: Request = (command, args) => this.deps.request(k, command, args)): Promise<boolean> {
    this.told.set(k.session, on);
    try {
      await via('evaluate', { expression: allStopExpression(on), context: 'repl' });
      this.deps.log(`rtdebug: all-stop ${on ? 'on' : 'off'} in job ${k.session} (the rtdebug.allStop setting, set in rank ${k.rank})`);
      return true;
    } catch (e) {
      this.told.delete(k.session);
      this.deps.log(`rtdebug: could not set all-stop in rank ${k.rank} of ${k.session}: ${(e as Error).message.split('\n')[0]}`);
      return false;
    }
  }
}
