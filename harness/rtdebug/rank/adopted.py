"""rtdebug's rank runtime, put into a rank of a job that was started without rtdebug (``rtdebug adopt``).

``rtdebug.common.inject`` runs a few lines in the rank's main thread, with the GIL held, that import this
module and call ``main(spec)``: it opens the same lazy, owner-only endpoint on base + RANK
(``rtdebug.rank.endpoint.Endpoint``, wired through ``RankRecord.connect``), arms the stacks dump
(``rtdebug.stacks.dump.arm``) and writes the rank's registry entry. It starts two threads (the endpoint's
accept loop, blocked in ``accept``, and the dump thread, blocked in ``read``) and nothing per step; the
rank keeps its own lifetime (no guards).
A second ``main`` changes nothing. ``detach`` undoes it all: the endpoint is shut, debugpy (if a client
ever came) stops tracing, the dump signal goes back to its default, ``sys.path`` loses what was added.

Each call writes its answer (one JSON object) to the file ``spec["result"]`` names, for the shell.

``detach`` leaves nothing behind (``rtdebug.rank.unadopt``): no listening or relayed socket, none of
pydevd's, no netlink socket of the access check, no fd on the record's ``coll-<rank>.bin``, no dump thread
or FIFO; the entry says ``detached`` (the rank runs on, without rtdebug: ``ps --all`` shows it, ``attach``
refuses it).
"""

from __future__ import annotations

import json
import os
import socket
import sys
import time
from typing import Any

_state: dict[str, Any] = {}


def _answer(path: str, result: dict[str, Any]) -> None:
    """Write the answer whole (the shell polls for the file); a shell that gave up has removed its dir."""
    try:
        fd = os.open(path + ".tmp", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as f:
            json.dump(result, f)
        os.replace(path + ".tmp", path)
    except OSError:
        pass


def _path(spec: dict[str, Any], added: str | None) -> list[str]:
    """What this rank's ``sys.path`` needs for rtdebug (``added`` by the injected lines) and debugpy."""
    import importlib.util

    paths = [added] if added else []
    extra = spec.get("debugpy_path")
    if extra and importlib.util.find_spec("debugpy") is None:  # a client's first attach imports debugpy
        sys.path.append(extra)
        paths.append(extra)
    return paths


def main(spec_json: str, added: str | None = None) -> None:
    """Adopt this rank as ``spec_json`` says; never raises into the rank (the answer says what happened)."""
    spec = json.loads(spec_json)
    if time.time() > spec.get("deadline", float("inf")):  # queued, and run after the shell gave up on it
        if added and added in sys.path:
            sys.path.remove(added)
        return _answer(spec["result"], {"status": "too late"})
    try:
        result = adopt(spec)
        if result["status"] == "adopted":
            _state["paths"] = _path(spec, added)
        elif added and added in sys.path:
            sys.path.remove(added)
    except BaseException as exc:  # the rank must go on whatever happened here
        result = {"status": "error", "error": f"{type(exc).__name__}: {exc}"}
    _answer(spec["result"], result)


def pg_timeout() -> tuple[float | None, str]:
    """The default process group's timeout, read from torch in this rank, and where it came from: torch's
    default for its backend, or the job's own ``timeout=`` (None and why: no group yet, or unknown)."""
    dist = sys.modules.get("torch.distributed")
    try:
        if dist is None or not dist.is_initialized():
            return None, "unknown: no process group yet"
        import torch

        c10d = dist.distributed_c10d
        group = c10d._get_default_group()
    except Exception:
        return None, "unknown: torch's group could not be read"
    for device, name, default in (("cpu", "gloo", "default_pg_timeout"), ("cuda", "NCCL", "default_pg_nccl_timeout")):
        try:
            timeout = group._get_backend(torch.device(device)).options._timeout
        except Exception:
            continue
        own = timeout != getattr(c10d, default, None)
        return float(timeout.total_seconds()), f"{name}, set by the job" if own else f"{name} default"
    return None, "unknown: no gloo or NCCL backend"


def adopt(spec: dict[str, Any]) -> dict[str, Any]:
    from rtdebug.rank import runtime

    if "session_id" in _state:
        return {"status": "already", "session_id": _state["session_id"], "pid": os.getpid()}
    if runtime.endpoint is not None:  # started by `rtdebug torchrun` / `run`: it has its own endpoint
        return {"status": "launched", "port": runtime.endpoint.port, "pid": os.getpid()}
    from rtdebug.rank import collrec
    from rtdebug.rank.endpoint import Endpoint
    from rtdebug.rank.record import RankRecord
    from rtdebug.registry.files import Registry
    from rtdebug.stacks import dump

    reg, sid, rank = Registry(spec["registry_dir"]), spec["session_id"], int(spec["rank"])
    record = RankRecord(
        reg, sid, rank, spec["host"], int(spec["port"]), False, spec["script"],
        local_rank=int(spec["local_rank"]), node_rank=int(spec["node_rank"]), world_size=int(spec["world_size"]),
    )  # fmt: skip
    endpoint = Endpoint(spec["host"], int(spec["port"]), allow=spec.get("allow", ""))
    _track_clients(endpoint)
    stacks = dump.arm(reg.session_dir(sid), rank)
    record.connect(endpoint)
    try:  # all or nothing: a failure leaves no listener, handler, wrapper or publisher behind
        endpoint.start()
        timeout, source = pg_timeout()
        _publish(record, spec)
        collectives = collrec.arm(reg.session_dir(sid), rank)
    except BaseException as exc:
        from rtdebug.rank import unadopt

        _state.clear()
        unadopt.shut(endpoint)
        unadopt.release(stacks)
        record.failed(str(exc), exit_code=None)
        raise
    record.ready(endpoint, stacks=stacks, collectives=collectives)
    import atexit

    _state.update(session_id=sid, endpoint=endpoint, record=record, stacks=stacks, prior=runtime.endpoint)
    atexit.register(_at_exit)
    runtime.endpoint = endpoint  # rtdebug.breakpoint() in the script now reaches this endpoint
    print(
        f"rtdebug: rank {rank} adopted (session {sid}): debug endpoint {spec['host']}:{spec['port']}", file=sys.stderr
    )
    return {"status": "adopted", "pid": os.getpid(), "pg_timeout_s": timeout, "pg_timeout_source": source}


def _publish(record: Any, spec: dict[str, Any]) -> None:
    """A multi-node job: keep this rank's entry (local rank 0: its node's session too) in the job's store, as
    a launched rank does (``rtdebug.rank.publish``); the record's final ``exited`` (detach) stops it. It never
    watches peers nor ends anything: the job is not rtdebug's."""
    if not spec.get("store"):
        return
    from rtdebug.rank.publish import Publisher
    from rtdebug.registry.c10d import split_endpoint

    host, port = split_endpoint(str(spec["store"]))
    pub = Publisher(host, port, str(spec["run_id"]), int(spec["rank"]), int(spec["node_rank"]),
                    secret=spec.get("secret") or None)  # fmt: skip
    if int(spec["local_rank"]) == 0:
        node = record.registry.read_session(spec["session_id"])
        pub.node = dict(node) if node else None
    record.publisher = pub
    pub.update(record.entry)


def _track_clients(endpoint: Any) -> None:
    """Keep this rank's end of every client's relay (``Handoff.connect``), so that ``detach`` can end the
    connections of clients still attached (the endpoint has no close of its own)."""
    start = endpoint.start_debugpy
    upstreams: list[socket.socket] = _state.setdefault("upstreams", [])

    def start_debugpy() -> Any:
        handoff = start()
        if not getattr(handoff, "rtdebug_tracked", False):
            connect = handoff.connect

            def tracked() -> socket.socket:
                s = connect()
                upstreams.append(s)
                return s

            handoff.connect, handoff.rtdebug_tracked = tracked, True
        return handoff

    endpoint.start_debugpy = start_debugpy


def _at_exit() -> None:
    """The rank's script ended (no exit code is known here): record it, and end the session once every
    rank's entry has ended, so that ``ps`` never calls a finished job's agent "died without teardown"."""
    record = _state.get("record")
    if record is None:
        return
    from rtdebug.rank.record import FINAL

    record.set(state="exited", exit_code=None)
    reg, sid = record.registry, _state["session_id"]
    try:
        if all(r["state"] in FINAL for r in reg.ranks(sid)):
            reg.update_session(sid, state="exited", ended_at=record.entry["updated_at"])
    except OSError:
        pass


def detach(result_path: str) -> None:
    """Undo ``adopt``; never raises into the rank (the answer says what happened)."""
    try:
        result = _detach() if "session_id" in _state else {"status": "not adopted"}
    except BaseException as exc:  # the rank must go on whatever happened here
        result = {"status": "error", "error": f"{type(exc).__name__}: {exc}"}
    _answer(result_path, dict(result, pid=os.getpid()))


def _detach() -> dict[str, Any]:
    """Shut the endpoint and every client's relay, stop debugpy, release the dump and the record, restore
    ``sys.path``; the entry says ``detached``."""
    from rtdebug.rank import runtime, unadopt

    endpoint, record = _state["endpoint"], _state["record"]
    unadopt.shut(endpoint)
    unadopt.end_clients(endpoint, _state.get("upstreams", []))
    unadopt.stop_debugger(endpoint)
    unadopt.release(_state["stacks"])  # torch's own collectives back: no per-call work after the adoption
    runtime.endpoint = _state["prior"]
    import atexit

    atexit.unregister(_at_exit)
    for p in _state.get("paths", []):
        if p in sys.path:
            sys.path.remove(p)
    record.set(state="detached", exit_code=None)  # final: a multi-node rank's publisher ends too
    _state.clear()
    print(f"rtdebug: rank {record.entry['rank']} detached; nothing of rtdebug runs here now", file=sys.stderr)
    return {"status": "detached"}
