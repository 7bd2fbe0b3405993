"""The registry's data model as types: each entry, the fields it nests, and the records it names.

TypedDicts, so that an entry stays the plain dict that JSON, the stores and every reader handle, while
mypy checks what the code builds. ``registry.schema.json`` (beside this file) is the contract the VS Code
extension reads too; ``tests/unit/test_schema.py`` holds these types equal to it: the same keys, required alike,
of the same JSON types. A change to one that is not made to the other fails there.

Written by the ranks (``rtdebug.rank.state``), the launchers (``rtdebug.registry.entry.session_entry``) and
a rank's dump thread (``StacksAnswer``); read by the shell, the views and the extension.
"""

from __future__ import annotations

from typing import Any, Literal, TypedDict

SessionState = Literal["starting", "running", "exited", "failed", "stopped", "orphaned"]
RankStateName = Literal["starting", "ready", "attached", "exited", "failed", "orphaned", "detached"]


class NodeInfo(TypedDict, total=False):
    """One node of a multi-node job, as its local rank 0 published it (store view only)."""

    node_rank: int
    host: str | None
    node_ip: str | None
    hostname: str | None
    session_id: str | None
    launcher_pid: int | None


class ConnectInfo(TypedDict, total=False):
    """Mode connected: how ``rtdebug connect`` reaches the job."""

    transport: str
    host: str
    jumps: list[str]
    remote_session: str


class ReplayInfo(TypedDict):
    """Mode replay: which captured rank ``rtdebug replay`` runs alone, from which capsule."""

    capsule: str
    rank: int
    world_size: int
    scratch: str


class _SessionRequired(TypedDict):
    schema_version: Literal[1]
    kind: Literal["session"]
    session_id: str
    mode: Literal["run", "torchrun", "ray", "adopted", "connected", "replay"]
    launcher_pid: int
    launcher_create_time: float
    command: list[str]
    cwd: str
    script: str
    nnodes: str
    nproc_per_node: int
    host: str
    port_base: int
    ports: list[int]
    started_at: float
    updated_at: float
    state: SessionState


class SessionEntry(_SessionRequired, total=False):
    """A session's entry (``session.json``): the launcher's, written by ``session_entry`` and its mode."""

    pg_timeout_s: float | None
    pg_timeout_source: str
    nccl_heartbeat_s: float | None
    ray_address: str
    ray_job_id: str
    driver_hostname: str
    driver_machine: str
    parent_session: str
    node_rank: int | None
    wait: str
    ended_at: float | None
    exit_code: int | None
    agent_pid: int | None
    agent_create_time: float | None
    orphaned_at: float | None
    error: str | None
    connect: ConnectInfo
    replay: ReplayInfo
    store: str
    rdzv_id: str | None
    verified: bool
    nodes: list[NodeInfo]


class _StacksRequired(TypedDict):
    main_thread: str
    bottom: list[str]


class StacksField(_StacksRequired, total=False):
    """How ``rtdebug stacks`` reaches a rank (``rtdebug.rank.stacks.dump.arm``): its FIFO and answer, or its signal."""

    request: str
    answer: str
    signal: int
    file: str


class _MeshRequired(TypedDict):
    dims: list[str]
    shape: list[int]
    coord: list[int]


class MeshInfo(_MeshRequired, total=False):
    """A DeviceMesh the rank made (``rtdebug.rank.meshes``)."""

    groups: list[str]
    descs: list[str]


class _StopRequired(TypedDict):
    kind: Literal["nonfinite", "disagree", "step"]
    reason: str


class StopInfo(_StopRequired, total=False):
    """Why a ``--stop-on`` stop holds the rank."""

    origin: bool | None
    step: int | None


class DebugInfo(TypedDict):
    """What the rank's debugger is doing (``rtdebug.rank.debugstate``): running, stopped at file:line (the DAP
    stop reason), paused by all-stop (``by``: the rank that stopped), or pausing (asked, not landed yet)."""

    state: Literal["running", "stopped", "paused", "pausing"]
    reason: str | None
    file: str | None
    line: int | None
    by: int | None
    since: float


class _TunnelRequired(TypedDict):
    node: str
    remote_host: str
    remote_port: int


class TunnelInfo(_TunnelRequired, total=False):
    """Mode connected: the forward behind a rank's local host:port, and the rank at its far end."""

    remote_pid: int


class CollectivesField(TypedDict):
    """Where the rank's collective record is (``rtdebug.registry.collseq``)."""

    file: str


class CollectiveRecord(TypedDict):
    """A collective record decoded (``rtdebug.registry.collseq.decode``); ``ps --json``'s ``collective``."""

    op: str
    seq: int
    state: Literal["entered", "returned"]
    file: str
    line: int
    func: str
    shapes: str
    dtype: str
    pg: str
    since: float


class _RankRequired(TypedDict):
    schema_version: Literal[1]
    kind: Literal["rank"]
    session_id: str
    rank: int
    local_rank: int
    node_rank: int
    world_size: int
    host: str
    port: int
    pid: int
    create_time: float
    state: RankStateName
    lazy: bool
    wait: bool
    attach_count: int
    script: str
    cwd: str
    started_at: float
    updated_at: float


class RankEntry(_RankRequired, total=False):
    """A rank's entry (``rank-<rank>.json``, a store key or a Ray KV value), kept by ``rtdebug.rank.state``."""

    node_id: str
    actor_id: str
    job_id: str
    debugpy_imported: bool
    node_ip: str
    hostname: str
    machine: str
    verified: bool
    tunnel: TunnelInfo
    refused_count: int
    stacks: StacksField | None
    meshes: list[MeshInfo]
    stop: StopInfo | None
    debug: DebugInfo | None
    all_stop: bool
    continue_all: bool
    collectives: CollectivesField | None
    collective: CollectiveRecord | None
    exit_code: int | None
    error: str | None


class SessionWithRanks(SessionEntry, total=False):
    """A session entry with its rank entries (``ranks``), as ``rtdebug.registry.liveness`` decides them."""

    ranks: list[RankEntry]


class ListedSession(SessionWithRanks, total=False):
    """A session as the views list it (``ps --json``): with the label of the view that found it (``source``)."""

    source: str


class RankStacks(TypedDict):
    """This process's stacks as text (``rtdebug.rank.stacks.take.take``): what every dump of a rank carries."""

    text: str
    main_id: str
    pid: int


class StacksAnswer(RankStacks):
    """What a rank's dump thread writes to its ``answer`` file (the schema's ``stacks_answer``): its stacks,
    the request's nonce, and torch's Flight Recorder summary (``rtdebug.rank.stacks.flight``; None: no group)."""

    nonce: str
    how: Literal["thread"]
    flight: dict[str, Any] | None
