/**
 * vscode://rtdebug.rtdebug-vscode/attach?session=<ID>&rank=<N> — what `rtdebug attach --vscode` opens.
 * rank omitted or "all" → attach to all ranks of the session (newest session when omitted).
 */
export type AttachRequest = { kind: 'rank'; session?: string; rank: number } | { kind: 'all'; session?: string };

export function parseAttachUri(path: string, query: string): AttachRequest {
  if (path.replace(/^\/+/, '') !== 'attach') throw new Error(`unknown rtdebug link path "${path}" (expected /attach)`);
  const q = new URLSearchParams(query);
  const session = q.get('session') || undefined;
  if (session !== undefined && !/^[A-Za-z0-9_.-]+$/.test(session)) throw new Error(`bad session id "${session}"`);
  const rank = q.get('rank');
  if (rank === null || rank === '' || rank === 'all') return { kind: 'all', session };
  if (!/^\d+$/.test(rank)) throw new Error(`bad rank "${rank}"`);
  return { kind: 'rank', session, rank: Number(rank) };
}
