import { ChildProcess, spawn } from 'child_process';
import { ALL_READY_RE, SESSION_STARTING_RE } from '../../common/constants';
import { replayArgs, ReplayOptions } from './replayModel';

/**
 * One `rtdebug torchrun|run|replay` job started by F5. It runs in its own process group; stop() sends SIGTERM to
 * the launcher (which tears the whole job down) and, after a grace period, SIGKILL to the group, so no
 * rank outlives the debug session.
 */
export interface JobSpec {
  python: string;
  module: string;
  mode: 'run' | 'torchrun' | 'replay';
  script: string;
  args: string[];
  cwd: string;
  env: NodeJS.ProcessEnv;
  portBase: number;
  host: string;
  wait: string;
  nprocPerNode?: number;
  torchrunArgs?: string[];
  /** The `rtdebug.allStop` setting: false starts the job with `--no-all-stop` (the ranks do all-stop). */
  allStop?: boolean;
  replay?: ReplayOptions; // mode replay: the capsule, the rank and the replay's options
}

export function jobArgs(s: JobSpec): string[] {
  if (s.mode === 'replay') {
    if (!s.replay) throw new Error('a replay needs a capsule and a rank');
    return ['-m', s.module, ...replayArgs(s.replay, s.portBase, s.host, s.wait !== 'none')];
  }
  if (s.mode === 'run') {
    const a = ['-m', s.module, 'run', '--port', String(s.portBase), '--host', s.host];
    if (s.wait !== 'none') a.push('--wait');
    if (s.allStop === false) a.push('--no-all-stop');
    return [...a, s.script, ...s.args];
  }
  const a = ['-m', s.module, 'torchrun', '--debug-port-base', String(s.portBase), '--debug-host', s.host, '--wait', s.wait];
  if (s.allStop === false) a.push('--no-all-stop');
  a.push(...(s.torchrunArgs ?? []));
  if (
    s.nprocPerNode !== undefined &&
    !(s.torchrunArgs ?? []).some((x) => x.startsWith('--nproc-per-node') || x.startsWith('--nproc_per_node'))
  ) {
    a.push('--nproc-per-node', String(s.nprocPerNode));
  }
  return [...a, s.script, ...s.args];
}

export class JobProcess {
  private proc: ChildProcess;
  private tail: string[] = [];
  private exitCode: number | null | undefined;
  readonly sessionId: Promise<string>;
  readonly exited: Promise<number | null>;

  constructor(
    spec: JobSpec,
    private onLine: (line: string) => void = () => {},
    private graceMs = 8000,
  ) {
    this.proc = spawn(spec.python, jobArgs(spec), { cwd: spec.cwd, env: spec.env, detached: true, stdio: ['ignore', 'pipe', 'pipe'] });
    let gotId: (id: string) => void = () => {};
    this.sessionId = new Promise((resolve) => {
      gotId = resolve;
    });
    this.exited = new Promise((resolve) => {
      this.proc.on('error', (e) => {
        this.line(`rtdebug-vscode: could not start ${spec.python}: ${e.message}`);
        this.exitCode = null;
        resolve(null);
      });
      this.proc.on('exit', (code, signal) => {
        this.exitCode = code ?? (signal ? 128 : null);
        resolve(this.exitCode);
      });
    });
    for (const stream of [this.proc.stdout, this.proc.stderr]) {
      let buf = '';
      stream?.on('data', (d: Buffer) => {
        buf += d.toString();
        let i;
        while ((i = buf.indexOf('\n')) >= 0) {
          const l = buf.slice(0, i);
          buf = buf.slice(i + 1);
          const m = SESSION_STARTING_RE.exec(l) ?? ALL_READY_RE.exec(l);
          if (m) gotId(m[m.length === 3 ? 2 : 1]);
          this.line(l);
        }
      });
    }
  }

  private line(l: string): void {
    this.tail.push(l);
    if (this.tail.length > 20) this.tail.shift();
    this.onLine(l);
  }

  get pid(): number | undefined {
    return this.proc.pid;
  }
  get running(): boolean {
    return this.exitCode === undefined;
  }
  lastLines(n = 5): string[] {
    return this.tail.slice(-n);
  }

  async stop(): Promise<void> {
    if (!this.running || this.proc.pid === undefined) return;
    const pgid = this.proc.pid;
    try {
      process.kill(pgid, 'SIGTERM');
    } catch {
      /* already gone */
    }
    const timer = setTimeout(() => {
      try {
        process.kill(-pgid, 'SIGKILL');
      } catch {
        /* gone */
      }
    }, this.graceMs);
    await this.exited;
    clearTimeout(timer);
    try {
      process.kill(-pgid, 'SIGKILL');
    } catch {
      /* whole group gone: the normal case */
    }
  }
}
