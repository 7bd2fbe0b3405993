import { connectEndpoint, isLoopbackHost } from './attachConfig';
import { AttachInfo } from './attachCli';

/**
 * Whether to ask before connecting the debugger to a rank, and what to say. A debug server can ask VS Code
 * to run a command (DAP `runInTerminal`), so connecting is itself a trust decision: a rank on another
 * machine (`local: false` in `attach --json`) is named, host:port, in a modal the user must confirm, and so
 * is any entry no job secret here verifies (`verified: false`: anyone who can write the c10d store or the
 * Ray KV could have written it, pointing anywhere, this machine included). An older harness without
 * `local` is judged by the host itself: only loopback counts as this machine. Pure, so the exact words are
 * unit-tested; attachService.ts shows it.
 */
export interface HostPrompt {
  /** Decisions are remembered per session, host and verification (attachService.ts). */
  key: string;
  message: string;
  detail: string;
  confirm: string;
  /** The line when the user does not confirm (logged by an "all ranks" session). */
  declined: string;
}

export class AttachDeclinedError extends Error {}

export const CONNECT = 'Connect';

export function hostPrompt(info: AttachInfo): HostPrompt | undefined {
  const verified = info.verified !== false;
  const local = info.local ?? isLoopbackHost(info.host);
  if (verified && local) return undefined;
  const ep = connectEndpoint(info);
  const where = ep.host.includes(':') ? `[${ep.host}]:${ep.port}` : `${ep.host}:${ep.port}`;
  const what = `rank ${info.rank} of session ${info.session_id}`;
  const message = verified
    ? `rtdebug: ${what} is on another machine, ${where}. Connect the debugger to it?`
    : `rtdebug: ${what} is unverified (no job secret here matches its entry); it points at ${where}${local ? ', on this machine' : ', another machine'}. Connect the debugger to it anyway?`;
  const detail =
    (verified
      ? ''
      : "Anyone who can write the cluster store or the Ray KV could have written this entry; set the job's RTDEBUG_JOB_SECRET here to verify it. ") +
    'A debug server can make VS Code run commands (DAP runInTerminal): connect only to a host you trust.';
  return {
    key: `${info.session_id}\n${ep.host}\n${verified ? 'verified' : 'unverified'}`,
    message,
    detail,
    confirm: CONNECT,
    declined: `not connecting to ${what} at ${where}${verified ? '' : ' (unverified)'}: not confirmed`,
  };
}
