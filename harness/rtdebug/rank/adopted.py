"""rtdebug's rank runtime, put into a rank of a job that was started without rtdebug (``rtdebug adopt``).

``rtdebug.inject.runner`` runs a few lines in the rank's main thread, with the GIL held, that import this
module and call ``main(spec)``: it opens the same lazy, owner-only endpoint on base + RANK
(``rtdebug.rank.endpoint.Endpoint``, wired through ``RankState.connect``), arms the stacks dump
(``rtdebug.stacks.dump.arm``), all-stop (``rtdebug.rank.allstop``, as a launched rank's) and writes the rank's
registry entry. It starts three threads (the endpoint's accept loop, blocked in ``accept``; the dump thread and
all-stop's wake-up, blocked in ``read``) and nothing per step; the rank keeps its own lifetime (no guards).
A second ``main`` changes nothing. ``detach`` undoes it all: the endpoint is shut, debugpy (if a client
ever came) stops tracing, the dump signal goes back to its default, ``sys.path`` loses what was added.

The lines run from a pending call in the main thread, or from a thread of the rank's own when the main
thread waits in a system call (``rtdebug.inject.ptrace_call``): ``main`` and ``detach`` take one lock, so
that a detach that arrives while an adoption is still running waits for it and then undoes it. Each returns
its answer (a JSON object); ``rtdebug.inject.exchange`` delivers it, or, if the shell gave up meanwhile,
has ``detach`` undo the adoption at once.

``detach`` leaves nothing behind: no listening or relayed socket, none of pydevd's, no netlink socket of
the access check, no fd on the record's ``coll-<rank>.bin``, no dump thread or FIFO, nothing of all-stop
(``rtdebug.rank.allstop``: its wake-up thread and ``allstop-<rank>.fifo``, the collective wrapper's hold, the
mmap of ``allstop.bin``, the endpoint's hook; a rank held by it goes on); the entry says
``detached`` (the rank runs on, without rtdebug: ``ps --all`` shows it, ``attach`` refuses it). The entry is
written relative to the session directory's fd, opened and checked at adoption (``_EntryFile``): a detach
that runs late, after someone who can write a parent of the registry swapped its path, still writes only
into the owner's own directory, never through a path or a symlink someone else made.
"""

from __future__ import annotations

import json
import os
import sys
import threading
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from rtdebug.common import atomic, log

if TYPE_CHECKING:
    from rtdebug.rank.allstop import AllStop
    from rtdebug.rank.endpoint import Endpoint
    from rtdebug.rank.state import RankState
    from rtdebug.registry.files import Registry

_lock = threading.RLock()  # main and detach may run in two threads of the rank (see the module docstring)


class _EntryFile:
    """This rank's entry file (``RankState``'s writer): relative to its session directory's fd, checked once
    (the rank's uid's, 0700), created ``O_EXCL|O_NOFOLLOW`` under a fresh name and renamed into place."""

    def __init__(self, path: str) -> None:
        self.fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
        st = os.fstat(self.fd)
        if st.st_uid != os.geteuid() or st.st_mode & 0o077:
            os.close(self.fd)
            raise OSError(f"{path} is not a directory of yours alone (0700)")

    def write_rank(self, entry: dict[str, Any]) -> None:
        if self.fd < 0:
            raise OSError("the session directory was let go (detached)")
        data = json.dumps(entry, indent=1, sort_keys=True).encode()
        atomic.write(f"rank-{int(entry['rank'])}.json", data, dir_fd=self.fd)

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1


@dataclass
class Adoption:
    """What one adoption holds until ``detach`` undoes it: the parts it started and what it replaced."""

    session_id: str
    registry: Registry
    entry_file: _EntryFile
    endpoint: Endpoint
    record: RankState
    stacks: dict[str, Any] | None  # what rtdebug.rank.startup.dumps armed
    prior: Endpoint | None  # runtime.endpoint before the adoption (None: the rank had none)
    allstop: AllStop | None = None  # this rank's part in the job's all-stop (``rtdebug.rank.allstop``)
    paths: list[str] = field(default_factory=list)  # added to sys.path, taken out again


_adoption: Adoption | None = None  # this rank's adoption; None: not adopted (or detached)


def _path(spec: dict[str, Any], added: str | None) -> list[str]:
    """What this rank's ``sys.path`` needs for rtdebug (``added`` by the injected lines) and debugpy."""
    import importlib.util

    paths = [added] if added else []
    extra = spec.get("debugpy_path")
    if extra and importlib.util.find_spec("debugpy") is None:  # a client's first attach imports debugpy
        sys.path.append(extra)
        paths.append(extra)
    return paths


def main(spec_json: str, added: str | None = None) -> dict[str, Any]:
    """Adopt this rank as ``spec_json`` says; its answer. Never raises into the rank."""
    spec = json.loads(spec_json)
    with _lock:
        try:
            result = adopt(spec)
            if result["status"] == "adopted" and _adoption is not None:
                _adoption.paths = _path(spec, added)
            elif added and added in sys.path:
                sys.path.remove(added)
        except BaseException as exc:  # the rank must go on whatever happened here
            log.swallowed("rank.adopted: the rank must go on whatever happened here")
            if added and added in sys.path:
                sys.path.remove(added)
            result = {"status": "error", "error": f"{type(exc).__name__}: {exc}"}
    return result


def session_id() -> str | None:
    """The session this rank is adopted into; None: not adopted (or detached)."""
    return _adoption.session_id if _adoption is not None else None


def set_stop_on(spec: str, gen: str) -> dict[str, Any]:
    """``rtdebug adopt --stop-on`` on an adopted rank (injected, ``rtdebug.commands.adoptstopon``): its answer."""
    if session_id() is None:
        return {"status": "not adopted"}
    from rtdebug.rank.stopon import arm

    return {"status": "set", "stop_on": arm.configure(spec, gen=gen)}


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
        log.swallowed("rank.adopted: pg_timeout: going on")
        return None, "unknown: torch's group could not be read"
    for device, name, default in (("cpu", "gloo", "default_pg_timeout"), ("cuda", "NCCL", "default_pg_nccl_timeout")):
        try:
            timeout = group._get_backend(torch.device(device)).options._timeout
        except Exception:
            log.swallowed("rank.adopted: pg_timeout: going on")
            continue
        own = timeout != getattr(c10d, default, None)
        return float(timeout.total_seconds()), f"{name}, set by the job" if own else f"{name} default"
    return None, "unknown: no gloo or NCCL backend"


def adopt(spec: dict[str, Any]) -> dict[str, Any]:
    global _adoption
    from rtdebug.rank import runtime

    if _adoption is not None:
        return {"status": "already", "session_id": _adoption.session_id, "pid": os.getpid()}
    if runtime.endpoint is not None:  # started by `rtdebug torchrun` / `run`: it has its own endpoint
        return {"status": "launched", "port": runtime.endpoint.port, "pid": os.getpid()}
    from rtdebug.rank import startup
    from rtdebug.rank.endpoint import Endpoint
    from rtdebug.rank.state import RankState
    from rtdebug.registry.files import Registry

    reg, sid, rank = Registry(spec["registry_dir"]), spec["session_id"], int(spec["rank"])
    entry_file = _EntryFile(str(reg.session_dir(sid)))
    try:
        record = RankState(
            entry_file, sid, rank, spec["host"], int(spec["port"]), False, spec["script"],
            local_rank=int(spec["local_rank"]), node_rank=int(spec["node_rank"]), world_size=int(spec["world_size"]),
        )  # fmt: skip
    except BaseException:
        entry_file.close()
        raise
    endpoint = Endpoint(spec["host"], int(spec["port"]), allow=spec.get("allow", ""))
    stacks = _main_bottom(startup.dumps(reg.session_dir(sid), rank))
    record.connect(endpoint)
    part: AllStop | None = None
    try:  # all or nothing: a failure leaves no listener, handler, wrapper or publisher behind
        endpoint.start()
        timeout, source = pg_timeout()
        _publish(record, spec, reg)
        collectives = startup.record(reg.session_dir(sid), rank)
        part = _arm_allstop(reg.session_dir(sid), rank, endpoint, record)
    except BaseException as exc:
        from rtdebug.rank import unadopt

        _close_allstop(part)
        unadopt.shut(endpoint)
        unadopt.release(stacks)
        record.failed(str(exc), exit_code=None)
        entry_file.close()
        raise
    record.ready(endpoint, stacks=stacks, collectives=collectives)
    import atexit

    _adoption = Adoption(sid, reg, entry_file, endpoint, record, stacks, prior=runtime.endpoint, allstop=part)
    atexit.register(_at_exit)
    runtime.endpoint = endpoint  # rtdebug.breakpoint() in the script now reaches this endpoint
    runtime.record = record  # a --stop-on stop says why in this entry
    runtime.allstop = part  # rtdebug.rank.api.all_stop (the extension's setting) reaches it
    print(
        f"rtdebug: rank {rank} adopted (session {sid}): debug endpoint {spec['host']}:{spec['port']}", file=sys.stderr
    )
    answer = {"status": "adopted", "pid": os.getpid(), "pg_timeout_s": timeout, "pg_timeout_source": source}
    if spec.get("stop_on") is not None:  # in force from a step every rank reaches together (arm.configure)
        from rtdebug.rank.stopon import arm

        answer["stop_on"] = arm.configure(str(spec["stop_on"]), gen=str(spec.get("stop_on_gen") or sid))
    return answer


def _arm_allstop(sdir: Any, rank: int, endpoint: Endpoint, record: RankState) -> AllStop | None:
    """This rank's part in the job's all-stop, as a launched rank's (``rtdebug.rank.bootstrap``): the board is the
    adopt session directory's, shared by the job's adopted ranks on this machine."""
    from rtdebug.rank import allstop, allstop_nodes
    from rtdebug.rank.collectives import recorder

    part = allstop.arm(sdir, rank, endpoint, record, recorder.hold_with)
    allstop_nodes.arm(part, record.publisher, sdir, str(record.entry["session_id"]))  # a multi-node job: job-wide
    return part


def _close_allstop(part: AllStop | None) -> None:
    """Undo ``_arm_allstop``: no hook, hold, FIFO, thread or mmap left; a rank held by it goes on."""
    if part is None:
        return
    from rtdebug.rank import allstop_nodes
    from rtdebug.rank.collectives import recorder

    try:
        part.close(recorder.hold_with)
    except Exception:
        log.swallowed("rank.adopted: all-stop's close: going on")
    allstop_nodes.close()  # after: the end of this rank's own stop reaches the other nodes first


def _stop_on_off(sid: str) -> None:
    """A detached rank stops on nothing: --stop-on goes off from the next step all ranks reach together (the
    detach reaches them one by one; none may stop checking alone). Its idle hooks stay (a flag test each)."""
    arm = sys.modules.get("rtdebug.rank.stopon.arm")
    if arm is not None and (arm.armed() or arm.changing()):
        arm.configure("", gen=f"detach-{sid}")


def _main_bottom(stacks: dict[str, Any] | None) -> dict[str, Any] | None:
    """``arm`` records the bottom frame of the thread it runs in, maybe a thread of our own here (see the
    module docstring); the fallback dump's completeness check needs the main thread's."""
    main = threading.main_thread()
    if stacks is None or threading.current_thread() is main:
        return stacks
    frame = sys._current_frames().get(main.ident or 0)
    while frame is not None and frame.f_back is not None:
        frame = frame.f_back
    if frame is not None:
        stacks["bottom"] = [frame.f_code.co_filename, frame.f_code.co_name]
    return stacks


def _publish(record: Any, spec: dict[str, Any], reg: Any) -> None:
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
        node = reg.read_session(spec["session_id"])
        pub.node = dict(node) if node else None
    record.publisher = pub
    pub.update(record.entry)


def _at_exit() -> None:
    """The rank's script ended (no exit code is known here): record it, and end the session once every
    rank's entry has ended, so that ``ps`` never calls a finished job's agent "died without teardown"."""
    a = _adoption
    if a is None:
        return
    from rtdebug.rank.state import FINAL

    record = a.record
    record.set(state="exited", exit_code=None)
    reg, sid = a.registry, a.session_id
    try:
        if all(r["state"] in FINAL for r in reg.ranks(sid)):
            reg.update_session(sid, state="exited", ended_at=record.entry["updated_at"])
    except OSError:
        pass


def detach() -> dict[str, Any]:
    """Undo ``adopt``; its answer. Never raises into the rank."""
    with _lock:
        try:
            result = _detach(_adoption) if _adoption is not None else {"status": "not adopted"}
        except BaseException as exc:  # the rank must go on whatever happened here
            log.swallowed("rank.adopted: the rank must go on whatever happened here")
            result = {"status": "error", "error": f"{type(exc).__name__}: {exc}"}
    return dict(result, pid=os.getpid())


def _detach(a: Adoption) -> dict[str, Any]:
    """Shut the endpoint and every client's relay, stop debugpy, release the dump and the record, restore
    ``sys.path``; the entry says ``detached``."""
    global _adoption
    from rtdebug.rank import runtime, unadopt

    endpoint, record = a.endpoint, a.record
    unadopt.shut(endpoint)
    _close_allstop(a.allstop)  # first: a rank held by all-stop goes on; its peers are let go of its stop
    unadopt.end_clients(endpoint)
    unadopt.stop_debugger(endpoint)
    unadopt.release(a.stacks)  # torch's own collectives back: no per-call work after the adoption
    runtime.endpoint = a.prior
    runtime.record = None
    runtime.allstop = None
    _stop_on_off(a.session_id)
    import atexit

    atexit.unregister(_at_exit)
    for p in a.paths:
        if p in sys.path:
            sys.path.remove(p)
    record.set(state="detached", exit_code=None)  # final: a multi-node rank's publisher ends too
    a.entry_file.close()
    _adoption = None
    print(f"rtdebug: rank {record.entry['rank']} detached; nothing of rtdebug runs here now", file=sys.stderr)
    return {"status": "detached"}
