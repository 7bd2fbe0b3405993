"""Running torchrun jobs on this machine, found from the process tree and each process's ``/proc/<pid>/environ``.

A rank is a process whose environment has torchrun's ``RANK``; its job is its parent (the torchrun agent,
or whatever started it) and the parent's other children that have ``RANK``. Read-only: nothing here signals
or traces a process. ``rtdebug adopt`` and ``rtdebug stacks --pid`` use it. A Ray Train worker (process title
``ray::RayTrainWorker``) is a job of its own: one rank, which Ray sets in the process, not in its environment.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field

import psutil

from rtdebug.common.errors import HarnessError

RANK_VARS = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "GROUP_RANK", "GROUP_WORLD_SIZE", "TORCHELASTIC_RUN_ID",
             "MASTER_ADDR", "MASTER_PORT", "RTDEBUG_SESSION")  # fmt: skip
RAY_WORKER_TITLE = "ray::RayTrainWorker"
TIMEOUT_VARS = ("TORCH_NCCL_HEARTBEAT_TIMEOUT_SEC", "TORCH_NCCL_BLOCKING_WAIT", "TORCH_NCCL_ASYNC_ERROR_HANDLING")


def environ(pid: int) -> dict[str, str]:
    """``pid``'s environment as it started; PermissionError for another user's process."""
    with open(f"/proc/{pid}/environ", "rb") as f:
        raw = f.read()
    out = {}
    for item in raw.split(b"\0"):
        key, sep, value = item.partition(b"=")
        if sep:
            out[key.decode(errors="replace")] = value.decode(errors="replace")
    return out


def owner(pid: int) -> int | None:
    try:
        return os.stat(f"/proc/{pid}").st_uid
    except OSError:
        return None


@dataclass
class RankProc:
    pid: int
    create_time: float
    env: dict[str, str]  # the RANK_VARS and TIMEOUT_VARS it has

    @property
    def rank(self) -> int:
        return int(self.env["RANK"])

    def num(self, key: str, default: int = 0) -> int:
        try:
            return int(self.env.get(key, default))
        except ValueError:
            return default


@dataclass
class Job:
    agent_pid: int
    agent_create_time: float
    script: str
    ranks: list[RankProc] = field(default_factory=list)
    kind: str = "torchrun"
    rdzv_endpoint: str | None = None  # the agent's --rdzv-endpoint (c10d rendezvous), if it names one

    @property
    def running_s(self) -> float:
        return time.time() - self.agent_create_time

    def heartbeat_s(self) -> float | None:
        """NCCL's heartbeat monitor ends a rank whose watchdog is stuck this long (``TORCH_NCCL_*``), if set."""
        value = (self.ranks[0].env if self.ranks else {}).get("TORCH_NCCL_HEARTBEAT_TIMEOUT_SEC", "")
        return float(value) if value.isdigit() else None

    @property
    def nnodes(self) -> int:
        return self.ranks[0].num("GROUP_WORLD_SIZE", 1) if self.ranks else 1

    def store(self) -> str | None:
        """``host:port`` of the job's store, where adopted ranks publish (multi-node jobs only): torchrun's
        c10d rendezvous endpoint, else (static rendezvous) the ranks' ``MASTER_ADDR:MASTER_PORT``."""
        if self.nnodes < 2 or not self.ranks:
            return None
        if self.rdzv_endpoint:
            return self.rdzv_endpoint
        env = self.ranks[0].env
        addr, port = env.get("MASTER_ADDR"), env.get("MASTER_PORT", "")
        return f"{addr}:{port}" if addr and port.isdigit() else None

    @property
    def run_id(self) -> str:
        return (self.ranks[0].env if self.ranks else {}).get("TORCHELASTIC_RUN_ID") or "none"

    @property
    def under_rtdebug(self) -> bool:
        """Started by ``rtdebug torchrun``/``run``: its ranks have an endpoint already, nothing to adopt."""
        return any(r.env.get("RTDEBUG_SESSION") for r in self.ranks)

    def listing(self, adopted_session: str | None) -> dict[str, object]:
        """The ``rtdebug adopt --list --json`` entry (the VS Code picker's contract)."""
        world = {r.num("WORLD_SIZE", -1) for r in self.ranks} - {-1}
        return {
            "pid": self.agent_pid, "kind": self.kind, "script": self.script,
            "ranks": [r.rank if "RANK" in r.env else None for r in self.ranks],  # a Ray worker's: not known yet
            "world_size": world.pop() if len(world) == 1 else None, "running_s": round(self.running_s, 1),
            "adopted_session": adopted_session,
        }  # fmt: skip

    def describe(self) -> str:
        return f"pid {self.agent_pid}  {self.script}  {len(self.ranks)} ranks  running {duration(self.running_s)}"


def duration(s: float) -> str:
    s = int(s)
    return f"{s // 3600}h{s // 60 % 60:02d}m" if s >= 3600 else f"{s // 60}m{s % 60:02d}s"


def is_agent(p: psutil.Process) -> bool:
    try:
        cmd = p.cmdline()
    except psutil.Error:
        return False
    return "torch.distributed.run" in cmd or any(os.path.basename(c) == "torchrun" for c in cmd[:2])


def _script(cmd: list[str]) -> str:
    """The training script in a torchrun (or rank) command line: the first ``*.py`` argument."""
    return next((c for c in cmd[1:] if c.endswith(".py")), " ".join(cmd[1:4]))


def rdzv_endpoint(cmd: list[str]) -> str | None:
    """torchrun's ``--rdzv-endpoint`` (or ``--rdzv_endpoint``) in the agent's command line, when the rendezvous
    is c10d's (whose store the agents host there); None for static rendezvous or another backend."""
    opts: dict[str, str] = {}
    for i, arg in enumerate(cmd):
        if arg.endswith(".py") and i > 0:
            break  # the script's own arguments follow
        name, eq, value = arg.partition("=")
        name = name.replace("_", "-")
        if name in ("--rdzv-endpoint", "--rdzv-backend"):
            opts[name] = value if eq else (cmd[i + 1] if i + 1 < len(cmd) else "")
    if opts.get("--rdzv-backend") != "c10d":
        return None
    return opts.get("--rdzv-endpoint") or None


def _rank_of(p: psutil.Process) -> RankProc | None:
    try:
        env = environ(p.pid)
        create_time = p.create_time()
    except (OSError, psutil.Error):
        return None
    if not env.get("RANK", "").isdigit():
        return None
    return RankProc(p.pid, create_time, {k: env[k] for k in RANK_VARS + TIMEOUT_VARS if k in env})


def job_of(parent: psutil.Process) -> Job:
    """The job whose ranks are ``parent``'s children with ``RANK`` set (sorted by rank)."""
    ranks = [r for c in parent.children() if (r := _rank_of(c)) is not None]
    ranks.sort(key=lambda r: r.rank)
    endpoint = None
    try:
        if is_agent(parent):
            cmd = parent.cmdline()  # one read of /proc/PID/cmdline (a process may change it between two)
            script, endpoint = _script(cmd), rdzv_endpoint(cmd)
        else:
            script = _script(psutil.Process(ranks[0].pid).cmdline())
    except (psutil.Error, IndexError):
        script = "?"
    return Job(parent.pid, parent.create_time(), script, ranks, rdzv_endpoint=endpoint)


def find_job(pid: int, ray: bool = False) -> Job:
    """The job of ``pid``, a torchrun agent or one of its ranks (``ray``: or a Ray Train worker, a job of its own
    whose rank only the process knows: see ``ray_worker``); one-line HarnessError otherwise."""
    try:
        p = psutil.Process(pid)
        if owner(pid) != os.geteuid():
            raise HarnessError(f"pid {pid} belongs to uid {owner(pid)}, not to you (uid {os.geteuid()}): not adopted")
        if ray and is_ray_worker(p):
            return ray_worker(p)
        if not is_agent(p):
            rank = _rank_of(p)
            parent = p.parent()
            if rank is None or parent is None:
                what = "a torchrun agent, a rank or a Ray Train worker" if ray else "a torchrun agent nor a rank"
                raise HarnessError(f"pid {pid} is neither {what} (no RANK in its environment)")
            p = parent
        job = job_of(p)
    except (psutil.NoSuchProcess, FileNotFoundError, ProcessLookupError):  # or it ended while being read
        raise HarnessError(f"no process {pid}") from None
    except psutil.Error as exc:
        raise HarnessError(f"cannot read pid {pid}: {exc}") from None
    if not job.ranks:
        raise HarnessError(f"torchrun agent {job.agent_pid} has no running rank (yet?)")
    return job


def is_ray_worker(p: psutil.Process) -> bool:
    """A Ray Train worker actor: Ray sets its process title (``/proc/PID/cmdline``) to ``ray::RayTrainWorker``."""
    try:
        cmd = p.cmdline()
    except psutil.Error:
        return False
    return bool(cmd) and cmd[0].startswith(RAY_WORKER_TITLE)


def ray_worker(p: psutil.Process) -> Job:
    """A Ray Train worker as a job of one rank whose rank is not known yet: Ray sets it in the process
    (``ray.train.get_context()``), never in its environment. ``rtdebug adopt`` asks the process first."""
    env = environ(p.pid)
    kept = {k: env[k] for k in ("RAY_JOB_ID", "RTDEBUG_SESSION", *TIMEOUT_VARS) if k in env}
    return Job(p.pid, p.create_time(), RAY_WORKER_TITLE, [RankProc(p.pid, p.create_time(), kept)], kind="ray")


def candidates() -> list[Job]:
    """Every torchrun job (with running ranks) and Ray Train worker of this user on this machine that was not
    started by rtdebug."""
    me = os.geteuid()
    jobs = []
    for p in psutil.process_iter():
        try:
            if p.uids().real != me:
                continue
            job = ray_worker(p) if is_ray_worker(p) else job_of(p) if is_agent(p) else None
        except (psutil.Error, OSError):
            continue
        if job is not None and job.ranks and not job.under_rtdebug:
            jobs.append(job)
    return jobs
