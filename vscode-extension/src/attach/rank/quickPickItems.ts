import { RankEntry, Session, isAttachable, isUnverified } from '../../registry/registryModel';

/** Quick-pick rows for "Attach to Rank…": one per live rank, newest session first. */
export interface RankPickItem {
  label: string;
  description: string;
  detail: string;
  session: string;
  rank: number;
  attachable: boolean;
}

export function rankPickItems(sessions: Session[]): RankPickItem[] {
  const items: RankPickItem[] = [];
  for (const s of sessions) {
    for (const r of s.ranks) items.push(rankItem(s, r));
  }
  return items;
}

function rankItem(s: Session, r: RankEntry): RankPickItem {
  const ok = isAttachable(r);
  return {
    label: `${ok ? '$(debug-alt)' : '$(loading~spin)'} rank ${r.rank}`,
    description: `${isUnverified(r) || isUnverified(s.entry) ? 'unverified · ' : ''}${r.host}:${r.port} · ${r.state}${r.lazy ? ' (lazy)' : ''}${r.wait ? ' · waiting for client' : ''}`,
    detail: `session ${s.entry.session_id} · ${s.entry.mode} ${shortScript(s.entry.script)} · node ${r.node_rank} local ${r.local_rank} · pid ${r.pid}`,
    session: s.entry.session_id,
    rank: r.rank,
    attachable: ok,
  };
}

function shortScript(p: string): string {
  const parts = p.split(/[\\/]/);
  return parts[parts.length - 1] || p;
}

/** Status bar text: live ranks in all sessions / ranks we are attached to. */
export function statusText(sessions: Session[], attached: number): { text: string; tooltip: string } | undefined {
  const live = sessions.reduce((n, s) => n + s.ranks.length, 0);
  if (!live && !attached) return undefined;
  const ids = sessions.map((s) => s.entry.session_id).join(', ');
  return {
    text: `$(debug) rtdebug ${attached}/${live}`,
    tooltip: `rtdebug: ${live} live rank(s) in ${sessions.length} session(s)${ids ? ` (${ids})` : ''}, ${attached} attached. Click to attach.`,
  };
}

/** "Attach to All Ranks" rows: one per session, an unverified one says so. */
export function sessionPickItems(sessions: Session[]): { label: string; description: string; detail: string }[] {
  return sessions.map((s) => ({
    label: s.entry.session_id,
    description: `${isUnverified(s.entry) ? 'unverified · ' : ''}${s.entry.mode} ${s.entry.script}`,
    detail: `${s.ranks.length} live rank(s)${s.entry.source && s.entry.source !== 'local' ? ` · via ${s.entry.source}` : ''}`,
  }));
}

/**
 * The session "Attach to All Ranks" takes without asking: the only live one, and only when it is not an
 * unverified remote entry (those are never the default; the user picks them from the list).
 */
export function implicitSession(sessions: Session[]): Session | undefined {
  return sessions.length === 1 && !isUnverified(sessions[0].entry) ? sessions[0] : undefined;
}
