import { basename } from '../common/fileName';
import { ranksWord } from '../common/rankList';
import { collectiveSummary, collectiveText, peersTooltip } from './collectiveText';
import { isBlocked } from '../registry/collectiveRecord';
import { RankDebugInfo } from '../attach/allstop/rankDebugState';
import { timeoutText, TimeoutText } from './pgTimeout';
import { isUnverified, ownPid, RankEntry, Session } from '../registry/registryModel';
import { coordLabel } from '../registry/meshes';
import { stopText } from '../registry/stopEntry';
import { parseStopDescription } from '../attach/allstop/stopFocus';

/**
 * Pure builders for the Ranks view rows: session → ranks, with a state a user can act on and text a
 * screen reader can say. The VS Code wrapper (ranksView.ts) only copies these fields into TreeItems.
 */
// 'halted': stopped by --stop-on and waiting for a debugger (its entry's `stop`), attachable
export type RankViewState = 'starting' | 'waiting' | 'ready' | 'attached' | 'stopped' | 'halted' | 'blocked' | 'failed' | 'orphaned';

export interface Row {
  id: string;
  label: string;
  description: string;
  tooltip: string;
  /** package.json menus match on it: rtdebugSession, rtdebugRank.<state> (+ ".attached" when ours). */
  contextValue: string;
  icon: string;
  /** Theme colour id for the icon, if any. */
  color?: string;
  accessibilityLabel: string;
}

const ICONS: Record<RankViewState, [string, string | undefined]> = {
  starting: ['loading~spin', undefined],
  waiting: ['watch', 'charts.yellow'],
  ready: ['circle-outline', undefined],
  attached: ['debug-alt', 'debugIcon.startForeground'],
  stopped: ['debug-pause', 'debugIcon.pauseForeground'],
  halted: ['debug-pause', 'charts.red'],
  blocked: ['debug-stackframe-dot', 'charts.orange'],
  failed: ['error', 'errorForeground'],
  orphaned: ['warning', 'charts.orange'],
};

const at = (l: { file: string; line: number }) => `${basename(l.file)}:${l.line}`;

/** The state shown for a rank: the registry's, refined by what our own debug session of it says. */
export function rankViewState(r: RankEntry, dbg: RankDebugInfo | undefined): { state: RankViewState; text: string } {
  if (r.state === 'orphaned') return { state: 'orphaned', text: 'orphaned (launcher gone)' };
  if (dbg) {
    if (dbg.state === 'stopped') {
      // a --stop-on stop says why in its description, as `rtdebug ps` says it (stopped (nonfinite: …))
      const so = parseStopDescription(dbg.description);
      const why = so ? `${so.kind}: ${so.reason}` : (dbg.reason ?? 'unknown');
      return { state: 'stopped', text: `stopped (${why})${dbg.where ? ` at ${at(dbg.where)}` : ''}` };
    }
    if (dbg.state === 'pausing' && (dbg.blockedAt || dbg.blockedNote)) {
      const where = dbg.blockedAt ? ` in ${dbg.blockedAt.function ?? '?'} (${at(dbg.blockedAt)})` : '';
      return { state: 'blocked', text: `blocked${where}: pause pending${dbg.blockedNote ? `; ${dbg.blockedNote}` : ''}` };
    }
    if (dbg.state === 'pausing') return { state: 'attached', text: 'attached, pausing…' };
    if (dbg.state === 'stepping') return { state: 'attached', text: 'stepping…' };
    if (r.state === 'failed') return { state: 'failed', text: `failed, attached${r.error ? `: ${r.error}` : ''}` };
    return { state: 'attached', text: 'attached, running' };
  }
  if (r.state === 'failed') return { state: 'failed', text: `failed${r.error ? `: ${r.error}` : ''}` };
  if (r.state === 'starting') return { state: 'starting', text: 'starting' };
  if (r.stop && r.state === 'ready') return { state: 'halted', text: stopText(r.stop) };
  if (r.stop && r.state === 'attached') return { state: 'attached', text: `${stopText(r.stop)}, another client attached` };
  if (r.state === 'attached') return { state: 'attached', text: 'attached (another client)' };
  if (r.wait && r.attach_count === 0) return { state: 'waiting', text: 'waiting for a debugger' };
  return { state: 'ready', text: r.attach_count > 0 ? 'ready (detached)' : 'ready' };
}

/** Said of an unverified session or rank (a remote entry anyone who can write that store could have written). */
export const UNVERIFIED_NOTE =
  'unverified: no job secret here matches this entry, so anyone who can write the cluster store or Ray KV could have written it; never chosen by default, and its host is shown before connecting (RTDEBUG_JOB_SECRET verifies it)';

/** A rank is unverified when its own entry is, or its session's is. */
export const rankUnverified = (s: Session, r: RankEntry): boolean => isUnverified(r) || isUnverified(s.entry);

/** What a session row adds while ranks are live: the pg timeout (time left while paused) and the collective positions. */
export interface SessionLive {
  timeout?: TimeoutText;
  collectives?: { text: string; differ: boolean };
  /** `stopped by --stop-on nonfinite (origin: rank 1)` while --stop-on holds ranks (their entries' `stop`). */
  stopOn?: string;
}

export function stopOnSummary(ranks: RankEntry[]): string | undefined {
  const held = ranks.filter((r) => r.stop);
  if (!held.length) return undefined;
  const kinds = [...new Set(held.map((r) => r.stop!.kind))].join(', ');
  const origins = held.filter((r) => r.stop!.origin === true).map((r) => r.rank);
  return `stopped by --stop-on ${kinds}${origins.length ? ` (origin: ${ranksWord(origins)})` : ''}`;
}

/** The session's live fragments from its ranks' debug states (`stoppedAt`) and collective positions. */
export function sessionLive(
  s: Session,
  dbg: (rank: number) => RankDebugInfo | undefined,
  nowMs: number,
  moving?: ReadonlySet<number>,
): SessionLive {
  const stoppedAtMs = s.ranks
    .map((r) => dbg(r.rank))
    .filter((d) => d?.state === 'stopped' && d.stoppedAt !== undefined)
    .map((d) => d!.stoppedAt!);
  const enteredSinceS = s.ranks
    .map((r) => r.collective)
    .filter((c) => c?.state === 'entered' && c.since !== undefined)
    .map((c) => c!.since!);
  return {
    timeout: timeoutText({ pgTimeoutS: s.entry.pg_timeout_s, source: s.entry.pg_timeout_source, stoppedAtMs, enteredSinceS, nowMs }),
    collectives: collectiveSummary(s.ranks, moving),
    stopOn: stopOnSummary(s.ranks),
  };
}

export function sessionRow(s: Session, live: SessionLive = {}): Row {
  const e = s.entry;
  const unverified = isUnverified(e);
  const where = e.source && e.source !== 'local' ? e.source : `node ${e.node_rank ?? 0} · ${e.host}`;
  const maxNodes = Number(
    String(e.nnodes ?? '1')
      .split(':')
      .pop(),
  );
  const nnodes = maxNodes > 1 ? ` · ${e.nnodes} nodes` : '';
  const extra = [live.stopOn, live.collectives?.text, live.timeout?.description]
    .filter((x) => x)
    .map((x) => ` · ${x}`)
    .join('');
  const desc = `${unverified ? 'unverified · ' : ''}${e.mode} ${basename(e.script)} · ${s.ranks.length} rank(s)${nnodes} · ${where} · ${e.state}${extra}`;
  const alarm = live.timeout?.urgent || live.collectives?.differ;
  return {
    id: `session:${e.session_id}`,
    label: e.session_id,
    description: desc,
    tooltip: [
      `rtdebug session ${e.session_id} (${e.state})`,
      ...(unverified ? [UNVERIFIED_NOTE] : []),
      `${e.mode}: ${e.script}`,
      `launcher pid ${e.launcher_pid}, ports ${portRange(e.ports)}`,
      `${e.nproc_per_node} rank(s) per node, nnodes ${e.nnodes}`,
      `found by: ${e.source ?? 'registry files'}`,
      ...(live.stopOn ? [live.stopOn] : []),
      ...(live.collectives ? [live.collectives.text] : []),
      ...(live.timeout ? [live.timeout.tooltip] : []),
    ].join('\n'),
    contextValue: 'rtdebugSession',
    icon: unverified ? 'unverified' : e.state === 'orphaned' || alarm ? 'warning' : 'server-process',
    color: unverified || e.state === 'orphaned' || alarm ? 'charts.orange' : undefined,
    accessibilityLabel: `rtdebug session ${e.session_id}${unverified ? ', unverified' : ''}, ${e.mode} ${basename(e.script)}, ${s.ranks.length} ranks, ${e.state}${extra.replace(/ · /g, ', ')}`,
  };
}

/**
 * A rank's row. `withTooltip` false leaves the tooltip empty: it lists every peer's collective, so the view
 * builds it only when hovered (resolveTreeItem), not for each of 1024 rows on every update.
 */
export function rankRow(s: Session, r: RankEntry, dbg: RankDebugInfo | undefined, nowMs = Date.now(), withTooltip = true): Row {
  const v = rankViewState(r, dbg);
  // blocked in a collective (its record says so) shows as blocked; the menus still see the rank's own state
  const [icon, color] = ICONS[isBlocked(r.collective, nowMs) && v.state !== 'stopped' ? 'blocked' : v.state];
  const coll = collectiveText(r.collective, nowMs, dbg?.state === 'stopped');
  const collDesc = coll ? ` · ${coll}` : '';
  const coords = coordLabel(r);
  const ours = dbg ? '.attached' : '';
  const refused = r.refused_count ? ` · ${r.refused_count} refused` : '';
  const node = r.hostname || r.node_ip ? ` · on ${r.hostname || r.node_ip}` : '';
  const unverified = rankUnverified(s, r);
  return {
    id: `rank:${s.entry.session_id}/${r.rank}`,
    label: `rank ${r.rank}`,
    description: `${unverified ? 'unverified · ' : ''}${v.text}${collDesc}${coords ? ` · ${coords}` : ''} · local ${r.local_rank} · ${r.host}:${r.port} · pid ${ownPid(r)}${node}${refused}`,
    tooltip: withTooltip ? rankTooltip(s, r, dbg, nowMs) : '',
    contextValue: `rtdebugRank.${v.state}${ours}`,
    icon,
    color,
    accessibilityLabel: `rank ${r.rank}${unverified ? ', unverified' : ''}, ${v.text}${coll ? `, ${coll}` : ''}, local rank ${r.local_rank}, endpoint ${r.host} port ${r.port}, process ${ownPid(r)}${coords ? `, coordinates ${coords.replace(/,/g, '')}` : ''}`,
  };
}

export function rankTooltip(s: Session, r: RankEntry, dbg: RankDebugInfo | undefined, nowMs = Date.now()): string {
  const v = rankViewState(r, dbg);
  const node = r.hostname || r.node_ip;
  const coords = coordLabel(r);
  return [
    `rank ${r.rank} of ${r.world_size} (local rank ${r.local_rank}, node ${r.node_rank})${coords ? `, mesh coordinates ${coords}` : ''}`,
    ...(rankUnverified(s, r) ? [UNVERIFIED_NOTE] : []),
    `state: ${v.text}`,
    ...(r.stop
      ? [
          `--stop-on ${r.stop.kind}${r.stop.origin === true ? ': it began here (origin)' : r.stop.origin === false ? ': received from another rank' : ''}${r.stop.step !== null ? `, at step ${r.stop.step}` : ''}`,
        ]
      : []),
    `debug endpoint ${r.host}:${r.port}, pid ${ownPid(r)}${node ? `, node ${r.hostname ?? ''} ${r.node_ip ?? ''}`.trimEnd() : ''}`,
    ...(ownPid(r) !== r.pid ? [`forwarded over ssh from ${r.tunnel?.node ?? 'its node'} (ssh pid ${r.pid})`] : []),
    `session ${s.entry.session_id}`,
    ...(r.refused_count ? [`${r.refused_count} connection(s) refused by the endpoint's access rule`] : []),
    ...peersTooltip(s.ranks, r.rank, nowMs),
  ].join('\n');
}

function portRange(ports: number[]): string {
  if (!ports.length) return 'none';
  return ports.length === 1 ? String(ports[0]) : `${ports[0]}-${ports[ports.length - 1]}`;
}

/**
 * The line above the Ranks view's rows: a refused registry root (the harness's words: nothing is listed
 * from it), else how many remote entries `rtdebug ps` skipped as junk, and the first of them.
 */
export function ranksViewMessage(rootProblem: string | undefined, skipped: string[]): string | undefined {
  if (rootProblem) return `rtdebug: ${rootProblem}`;
  const n = skipped.length;
  if (!n) return undefined;
  return `rtdebug ps skipped ${n === 1 ? 'a remote entry that is' : `${n} remote entries that are`} not a valid record: ${skipped[0].replace(/^rtdebug: warning: skipped /, '')}`;
}
