import { HarnessCliError, HarnessCommand, runHarness } from '../../common/harnessCli';

/** `rtdebug attach --rank N --json`: where a rank listens, and the configuration to attach to it. */
/**
 * What `attach --json` prints. `verified`: false for a remote entry no job secret here verifies; `local`:
 * whether the host is this machine (both absent from older harnesses: see remoteAttach.ts).
 */
export interface AttachInfo {
  session_id: string;
  rank: number;
  host: string;
  port: number;
  configuration: Record<string, unknown>;
  verified?: boolean;
  local?: boolean;
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
  try {
    v = JSON.parse(out);
  } catch {
    throw new HarnessCliError(`attach printed no JSON: ${out.slice(0, 200)}`);
  }
  if (typeof v.port !== 'number' || typeof v.configuration !== 'object')
    throw new HarnessCliError('attach --json: missing port/configuration');
  return v;
}
