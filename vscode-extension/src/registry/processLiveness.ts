import * as fs from 'fs';

/**
 * Is `pid` alive and is it the same process that wrote the entry? The harness records psutil's
 * create_time; on Linux we recompute it from /proc (boot time + start ticks) and allow a small skew,
 * elsewhere we only check that the pid exists.
 */
export type LivenessCheck = (pid: number, createTime?: number) => boolean;

const CLOCK_TICKS = 100; // sysconf(_SC_CLK_TCK) on every Linux ABI node runs on
let bootTime: number | undefined;

function linuxBootTime(): number | undefined {
  if (bootTime !== undefined) return bootTime;
  try {
    const m = /^btime (\d+)$/m.exec(fs.readFileSync('/proc/stat', 'utf8'));
    bootTime = m ? Number(m[1]) : undefined;
  } catch {
    bootTime = undefined;
  }
  return bootTime;
}

export function linuxCreateTime(pid: number): number | undefined {
  const boot = linuxBootTime();
  if (boot === undefined) return undefined;
  try {
    const stat = fs.readFileSync(`/proc/${pid}/stat`, 'utf8');
    const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
    return boot + Number(fields[19]) / CLOCK_TICKS; // field 22 (starttime); fields[0] is field 3
  } catch {
    return undefined;
  }
}

function isZombie(pid: number): boolean {
  try {
    const stat = fs.readFileSync(`/proc/${pid}/stat`, 'utf8');
    return stat.slice(stat.lastIndexOf(')') + 2, stat.lastIndexOf(')') + 3) === 'Z';
  } catch {
    return false;
  }
}

export const isProcessLive: LivenessCheck = (pid, createTime) => {
  try {
    process.kill(pid, 0);
  } catch (e) {
    if ((e as NodeJS.ErrnoException).code !== 'EPERM') return false;
  }
  if (isZombie(pid)) return false;
  if (createTime === undefined) return true;
  const actual = linuxCreateTime(pid);
  return actual === undefined || Math.abs(actual - createTime) < 2;
};
