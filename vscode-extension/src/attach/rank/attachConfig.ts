import { DEBUG_TYPE, DEBUGPY_TYPE, ENTRY_PREFIX } from '../../common/constants';
import { AttachInfo } from './attachCli';
import { Session } from '../../registry/registryModel';

/**
 * The one place that turns the harness's attach configuration (`attach --json`, the source of truth for its
 * shape) into the configuration of the debug session the extension starts. With the Python Debugger
 * installed it stays a stock `debugpy` attach; without it the type becomes ours, and our descriptor factory
 * answers `DebugAdapterServer(port, host)` for it (the debugpy endpoint speaks DAP itself).
 */
export interface RankRef {
  session: string;
  rank: number;
}

export interface RankDebugConfig extends Record<string, unknown> {
  type: string;
  request: 'attach';
  name: string;
  connect: { host: string; port: number };
  rtdebugRank: RankRef;
}

export function rankSessionName(session: string, rank: number): string {
  return `${ENTRY_PREFIX}rank ${rank} (${session})`;
}

/** Where the debug session for `info` connects: the configuration's `connect`, else the host/port fields. */
export function connectEndpoint(info: AttachInfo): { host: string; port: number } {
  const connect = (info.configuration.connect as { host?: string; port?: number } | undefined) ?? {};
  return { host: connect.host ?? info.host, port: connect.port ?? info.port };
}

export function toRankDebugConfig(info: AttachInfo, useDebugpy: boolean): RankDebugConfig {
  return {
    ...info.configuration,
    type: useDebugpy ? DEBUGPY_TYPE : DEBUG_TYPE,
    request: 'attach',
    name: rankSessionName(info.session_id, info.rank),
    connect: connectEndpoint(info),
    rtdebugRank: { session: info.session_id, rank: info.rank },
  };
}

/** The endpoint our fallback adapter connects to, or undefined if this is not a single-rank config. */
export function rankEndpoint(config: Record<string, unknown>): { host: string; port: number } | undefined {
  const c = config.connect as { host?: unknown; port?: unknown } | undefined;
  if (!c || typeof c.port !== 'number') return undefined;
  return { host: typeof c.host === 'string' && c.host ? c.host : '127.0.0.1', port: c.port };
}

const LOCAL = new Set(['127.0.0.1', 'localhost', '0.0.0.0', '::1', '::', '']);

/** A host that is this machine for sure without asking the harness: loopback or the wildcard address. */
export function isLoopbackHost(host: string): boolean {
  return LOCAL.has(host) || /^127\.\d+\.\d+\.\d+$/.test(host);
}

/**
 * Which registry rank a debug session talks to, for sessions started from the generated `"type": "debugpy"`
 * configs (they carry no `rtdebugRank`): the live rank whose endpoint is `connect` (port equal, hosts equal
 * or both local).
 */
export function rankForEndpoint(sessions: Session[], ep: { host: string; port: number }): RankRef | undefined {
  for (const s of sessions) {
    for (const r of s.ranks) {
      if (r.port === ep.port && (r.host === ep.host || (LOCAL.has(r.host) && LOCAL.has(ep.host))))
        return { session: s.entry.session_id, rank: r.rank };
    }
  }
  return undefined;
}
