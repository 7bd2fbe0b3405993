/**
 * Typed view of the registry files (harness/rtdebug/registry/registry.schema.json, schema version 1).
 * The schema itself is the contract; the unit tests validate fixtures and live entries against it with ajv.
 * At run time we only check what the extension relies on, so a newer harness adding fields keeps working.
 */
// 'orphaned': the launcher is gone but the process lives on (written by newer harnesses, or inferred here).
import { Collective } from './collectiveRecord';
import { Mesh, parseMeshes } from './meshes';
import { parseStop, StopEntry } from './stopEntry';

export type RankState = 'starting' | 'ready' | 'attached' | 'exited' | 'failed' | 'orphaned';
export type SessionState = 'starting' | 'running' | 'exited' | 'failed' | 'stopped' | 'orphaned';

export interface SessionEntry {
  schema_version: 1;
  kind: 'session';
  session_id: string;
  mode: 'run' | 'torchrun' | 'ray' | 'adopted' | 'connected' | 'replay';
  replay?: { capsule: string; rank: number; world_size: number; scratch: string }; // mode replay: which captured rank runs alone
  launcher_pid: number;
  launcher_create_time: number;
  command: string[];
  cwd: string;
  script: string;
  nnodes: string;
  nproc_per_node: number;
  node_rank?: number | null;
  host: string;
  port_base: number;
  ports: number[];
  wait?: string;
  started_at: number;
  updated_at: number;
  ended_at?: number | null;
  exit_code?: number | null;
  state: SessionState;
  /** Which listing found it (`rtdebug ps --json`: "local", a c10d store, a Ray cluster); absent = this machine's files. */
  source?: string;
  /** `rtdebug ps --json`: false for a remote entry no job secret here verifies (anyone who can write that store could have). */
  verified?: boolean;
  /** The job's process-group timeout and where that figure came from (contract B2); adopted sessions' files carry the first. */
  pg_timeout_s?: number | null;
  pg_timeout_source?: string;
}

export interface RankEntry {
  schema_version: 1;
  kind: 'rank';
  session_id: string;
  rank: number;
  local_rank: number;
  node_rank: number;
  world_size: number;
  host: string;
  port: number;
  pid: number;
  create_time: number;
  state: RankState;
  lazy: boolean;
  wait: boolean;
  attach_count: number;
  script: string;
  cwd: string;
  started_at: number;
  updated_at: number;
  exit_code?: number | null;
  error?: string | null;
  /** Connections the rank's endpoint refused (access rule); newer harnesses only. */
  refused_count?: number;
  /** Store view and Ray workers: the rank's node (where a client reaches it). */
  node_ip?: string;
  hostname?: string;
  /** `rtdebug ps --json`: false for a remote entry no job secret here verifies. */
  verified?: boolean;
  /** `rtdebug ps --json` (contract C2): the last collective this rank entered, checked by parseCollective. */
  collective?: Collective | null;
  /** Set while --stop-on holds the rank stopped (issue 30), checked by parseStop; null otherwise. */
  stop?: StopEntry | null;
  /** The DeviceMeshes the rank made (issue 31), checked by parseMeshes: only well-formed ones. */
  meshes?: Mesh[];
  /** The job's all-stop, done by its ranks (on unless started with --no-all-stop); read as a boolean only. */
  all_stop?: boolean;
  /** The job's continue-all (a continue in one rank continues all; off with --no-continue-all); newer harnesses only. */
  continue_all?: boolean;
  /**
   * What the rank's debugger is doing: `state` (`running`, `stopped`, `paused`, `pausing`, ...), `reason` (the DAP stop
   * reason, `all-stop` when paused by it), `by` (the rank whose stop paused it); read defensively (continuePlan.ts).
   */
  debug?: { state?: unknown; reason?: unknown; by?: unknown };
  /** Mode connected: the ssh forward behind host:port (`pid` is then the ssh master's); read by ownPid. */
  tunnel?: TunnelInfo;
}

export interface TunnelInfo {
  node: string;
  remote_host: string;
  remote_port: number;
  /** The rank's own pid, on its node. */
  remote_pid?: number;
}

/**
 * The rank's own pid, as `rtdebug ps` shows it: a connected rank's is on its node (`tunnel.remote_pid`), never the
 * ssh master's that carries its forward here (the entry's `pid`, which liveness checks). A forged value is ignored.
 */
export function ownPid(r: RankEntry): number {
  const t: unknown = r.tunnel;
  const remote = typeof t === 'object' && t !== null ? (t as Record<string, unknown>).remote_pid : undefined;
  return typeof remote === 'number' && Number.isSafeInteger(remote) && remote > 0 ? remote : r.pid;
}

/** An entry a remote listing could not verify (this machine's files are always trusted: the root is the owner's alone). */
export const isUnverified = (e: { verified?: boolean }): boolean => e.verified === false;

export interface Session {
  entry: SessionEntry;
  ranks: RankEntry[];
}

export class RegistryFormatError extends Error {}

const SESSION_FIELDS: Record<string, string> = {
  session_id: 'string',
  mode: 'string',
  launcher_pid: 'number',
  cwd: 'string',
  script: 'string',
  nproc_per_node: 'number',
  host: 'string',
  port_base: 'number',
  state: 'string',
  started_at: 'number',
};
const RANK_FIELDS: Record<string, string> = {
  session_id: 'string',
  rank: 'number',
  local_rank: 'number',
  node_rank: 'number',
  world_size: 'number',
  host: 'string',
  port: 'number',
  pid: 'number',
  state: 'string',
  script: 'string',
  cwd: 'string',
};

function check(obj: Record<string, unknown>, kind: string, fields: Record<string, string>, where: string): void {
  if (obj.schema_version !== 1) throw new RegistryFormatError(`${where}: unsupported schema_version ${String(obj.schema_version)}`);
  if (obj.kind !== kind) throw new RegistryFormatError(`${where}: expected kind "${kind}", got ${JSON.stringify(obj.kind)}`);
  for (const [name, type] of Object.entries(fields)) {
    if (typeof obj[name] !== type) throw new RegistryFormatError(`${where}: field "${name}" must be a ${type}`);
  }
}

function parseObject(text: string, where: string): Record<string, unknown> {
  let value: unknown;
  try {
    value = JSON.parse(text);
  } catch (e) {
    throw new RegistryFormatError(`${where}: not JSON (${(e as Error).message})`);
  }
  if (typeof value !== 'object' || value === null || Array.isArray(value)) throw new RegistryFormatError(`${where}: not a JSON object`);
  return value as Record<string, unknown>;
}

export function parseSessionEntry(text: string, where = 'session.json'): SessionEntry {
  const obj = parseObject(text, where);
  check(obj, 'session', SESSION_FIELDS, where);
  return obj as unknown as SessionEntry;
}

export function parseRankEntry(text: string, where = 'rank.json'): RankEntry {
  const obj = parseObject(text, where);
  check(obj, 'rank', RANK_FIELDS, where);
  // the fields the views show are replaced by their checked forms (an entry may be forged)
  return { ...obj, stop: parseStop(obj.stop), meshes: parseMeshes(obj.meshes) } as unknown as RankEntry;
}

/** A rank a client can attach to now ("attached" stays attachable: debugpy accepts a new client after a detach). */
export function isAttachable(rank: RankEntry): boolean {
  return rank.state === 'ready' || rank.state === 'attached';
}

export function isLiveRank(rank: RankEntry): boolean {
  return rank.state === 'starting' || isAttachable(rank);
}
