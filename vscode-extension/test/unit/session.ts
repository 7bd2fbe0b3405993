import { RankEntry, RankState, Session } from '../../src/registry/registryModel';

/** Registry entries for tests (schema-valid shapes). */
export function rankEntry(r: number, state: RankState, over: Partial<RankEntry> = {}): RankEntry {
  return {
    schema_version: 1,
    kind: 'rank',
    session_id: 's1',
    rank: r,
    local_rank: r,
    node_rank: 0,
    world_size: 2,
    host: '127.0.0.1',
    port: 5678 + r,
    pid: 100 + r,
    create_time: 1,
    state,
    lazy: false,
    wait: false,
    attach_count: 0,
    script: '/p/t.py',
    cwd: '/p',
    started_at: 1,
    updated_at: 1,
    ...over,
  };
}

export function sessionOf(ranks: RankEntry[], id = 's1', started = 1): Session {
  return {
    entry: {
      schema_version: 1,
      kind: 'session',
      session_id: id,
      mode: 'torchrun',
      launcher_pid: 1,
      launcher_create_time: 1,
      command: [],
      cwd: '/p',
      script: '/p/t.py',
      nnodes: '1',
      nproc_per_node: 2,
      host: '127.0.0.1',
      port_base: 5678,
      ports: [5678, 5679],
      started_at: started,
      updated_at: 1,
      state: 'running',
    },
    ranks,
  };
}
