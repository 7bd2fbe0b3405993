"""Ray Train workers (``num_workers > 0``): a lazy endpoint on ``base + world rank`` in every worker.

The harness rides Ray's own extension point: ``rtdebug run`` names
``RtdebugCallback`` in ``RAY_TRAIN_CALLBACKS``. Ray builds it in the driver
(``trainer.fit()``), where ``__init__`` captures the run's settings; the
instance is pickled to the controller and to every worker, so no environment
has to reach the workers. In a worker, ``after_init_train_context`` (ranks now
known) opens the endpoint without blocking (the controller waits for it) and
registers the rank in the GCS internal KV (``rtdebug.registry.ray_kv``), where
``rtdebug ps`` on any machine finds it. The controller (always on the driver's
node) registers the session and removes it when the run ends.

Anyone who reaches the GCS can write the KV, so every entry is signed with the
driver session's secret (``rtdebug.registry.signing``: kept 0600 in its session
directory, or the user's ``RTDEBUG_JOB_SECRET``), which reaches the controller
and the workers inside the pickled callback; ``rtdebug stop`` ends a run only
through that signed entry's driver session. Entries name the script, never its
arguments.

A paused worker must kill nothing: Ray health-checks each worker through an
actor method that runs on the actor's main thread while the train function runs
in its own thread. That thread is marked ``pydev_do_not_trace``, so debugpy's
"suspend all threads" at a breakpoint leaves it answering. The process-group
timeout Ray passes (``TorchConfig.timeout_s``, 1800 s) is raised to
``--pg-timeout``, and ``breakpoint()`` goes to our endpoint instead of Ray's
hook, which would call ``debugpy.listen`` a second time.

All-stop (``rtdebug.rank.ray_allstop``): each worker's board is a private file, armed with the endpoint; the
workers' boards are joined through the process group's store once the train function is launched.
"""

from __future__ import annotations

import itertools
import os
import socket
import sys
import threading
import time
from typing import TYPE_CHECKING, Any

from ray.train.v2._internal.execution.callback import ControllerCallback, WorkerCallback

from rtdebug.common import log
from rtdebug.common.config import DEFAULT_POST_MORTEM_WAIT_S, WORKER_PORT_BASE_VAR, RankConfig
from rtdebug.common.imports import when_imported
from rtdebug.common.ports import DEFAULT_PORT_BASE, port_for_rank
from rtdebug.common.procinfo import machine_id, process_create_time
from rtdebug.common.rankenv import DEFAULT_PG_TIMEOUT_S
from rtdebug.rank import postmortem, ray_allstop, runtime
from rtdebug.registry import ray_kv, signing
from rtdebug.registry.entry import new_session_id, session_entry
from rtdebug.registry.files import Registry

if TYPE_CHECKING:
    from rtdebug.rank.endpoint import Endpoint
    from rtdebug.rank.state import RankState

_runs = itertools.count(1)


class _Worker:
    """This worker process's debug state (one train context at a time)."""

    record: RankState | None = None
    endpoint: Endpoint | None = None
    pg_timeout_applied: float | None = None
    dumps: Any = None  # rtdebug.rank.stacks.watch.KVWatch: answers job-wide stacks from the KV
    allstop: Any = None  # rtdebug.rank.ray_allstop.RayAllStop: this worker's part in the job's all-stop


def _flag(name: str) -> bool:
    return os.environ.get(name) == "1"


class RtdebugCallback(WorkerCallback, ControllerCallback):
    def __init__(self) -> None:
        """Runs in the driver at ``fit()``: everything the workers need travels inside the instance."""
        env = os.environ
        parent = env.get("RTDEBUG_SESSION") or new_session_id()
        self.parent_session = env.get("RTDEBUG_SESSION")
        self.session_id = f"{parent}-ray{next(_runs)}"
        self.port_base = int(env.get(WORKER_PORT_BASE_VAR, DEFAULT_PORT_BASE + 1))
        self.host = env.get("RTDEBUG_HOST", "127.0.0.1")
        self.allow = env.get("RTDEBUG_ALLOW", "")
        self.wait = env.get("RTDEBUG_WAIT", "none")
        self.eager = _flag("RTDEBUG_EAGER")
        self.post_mortem = _flag("RTDEBUG_POST_MORTEM")
        self.post_mortem_wait_s = float(env.get("RTDEBUG_POST_MORTEM_WAIT", DEFAULT_POST_MORTEM_WAIT_S))
        self.pg_timeout_s = float(env.get("RTDEBUG_PG_TIMEOUT", DEFAULT_PG_TIMEOUT_S))
        self.script = env.get("RTDEBUG_SCRIPT") or (sys.argv[0] if sys.argv else "?")
        self.stop_on = env.get("RTDEBUG_STOP_ON", "")
        self.all_stop = ray_allstop.setting(env)  # --no-all-stop / --no-continue-all, for the workers
        self.cwd = os.getcwd()
        self.registry_dir = str(Registry().root)
        self.driver_pid = os.getpid()
        self.driver_create_time = process_create_time(self.driver_pid) or time.time()
        self.driver_hostname = socket.gethostname()
        self.driver_machine = machine_id()
        self.secret = _secret(self.registry_dir, self.parent_session)

    # -- controller (runs on the driver's node) ------------------------------------------
    def after_controller_start(self, train_run_context) -> None:
        import ray

        ctx = ray.get_runtime_context()
        n = train_run_context.scaling_config.max_workers
        entry = session_entry(
            self.session_id,
            "ray",
            launcher_pid=self.driver_pid,
            launcher_create_time=self.driver_create_time,
            command=[],  # never the command line: the KV is readable by anyone who reaches the cluster
            cwd=self.cwd,
            state="running",
            script=self.script,
            nnodes="1",
            nproc_per_node=max(n, 1),
            node_rank=None,
            host=self.host,
            port_base=self.port_base,
            ports=[port_for_rank(self.port_base, r) for r in range(n)],
            wait=self.wait,
            ray_address=ctx.gcs_address,
            ray_job_id=ctx.get_job_id(),
            driver_hostname=self.driver_hostname,
            driver_machine=self.driver_machine,
        )
        if self.parent_session:
            entry["parent_session"] = self.parent_session
            # the driver's own (file) entry learns where its workers are registered
            Registry(self.registry_dir).update_session(self.parent_session, ray_address=ctx.gcs_address)
        ray_kv.connected(self.secret).put_session(entry)

    def after_controller_finish(self, result) -> None:
        ray_kv.connected().delete_session(self.session_id)

    def before_controller_abort(self) -> None:
        ray_kv.connected().delete_session(self.session_id)

    # -- workers ---------------------------------------------------------------------------
    def after_init_train_context(self) -> None:
        _start_worker(self)

    def before_worker_shutdown(self) -> None:
        record = _Worker.record
        if _Worker.dumps is not None:
            _Worker.dumps.close()
        if _Worker.allstop is not None:
            _Worker.allstop.close()
            _Worker.allstop = None
        if record is not None and record.state in ("starting", "ready", "attached"):
            record.exited(0)


def _secret(registry_dir: str, parent: str | None) -> str | None:
    """The run's signing secret: the user's, else the driver session's own (created 0600 on first use)."""
    try:
        supplied = signing.supplied_secret()
        return signing.ensure_secret(Registry(registry_dir).session_dir(parent), supplied) if parent else supplied
    except Exception as exc:  # a bad secret file, a session dir we cannot write: unsigned (shown unverified)
        log.swallowed("rank.ray_worker: a bad secret file, a session dir we cannot write: unsigned (shown unverified)")
        print(f"rtdebug: warning: Ray KV entries go unsigned: {exc}", file=sys.stderr, flush=True)
        return None


def _start_worker(cb: RtdebugCallback) -> None:
    import ray
    from ray.train.v2._internal.execution.context import get_train_context

    from rtdebug.rank import startup
    from rtdebug.rank.endpoint import Endpoint
    from rtdebug.rank.state import RankState

    ctx = ray.train.get_context()
    rank, world = ctx.get_world_rank(), ctx.get_world_size()
    rc = ray.get_runtime_context()
    node_ip = ray.util.get_node_ip_address()
    # loopback on the driver's machine; on another node its address, under the --allow access rules
    loopback = cb.host in ("127.0.0.1", "localhost", "::1")
    same_machine = socket.gethostname() == cb.driver_hostname
    host = cb.host if (loopback and same_machine) or (not loopback and cb.host != "auto") else node_ip
    port = port_for_rank(cb.port_base, rank)
    os.environ.setdefault("RANK", str(rank))  # rtdebug.breakpoint(rank=...) before Ray's torch setup sets it
    startup.fixes(
        RankConfig(session_id=cb.session_id, pg_timeout_s=cb.pg_timeout_s, stop_on=getattr(cb, "stop_on", ""))
    )
    startup.record(None, rank)  # in memory: the publisher answers job-wide stacks with collrec.snapshot()
    _raise_ray_pg_timeout(cb.pg_timeout_s)
    # the actor's RPC methods (health check, poll_status) run on this thread: never suspend it
    threading.current_thread().pydev_do_not_trace = True  # type: ignore[attr-defined]
    sys.breakpointhook = breakpointhook
    os.environ["PYTHONBREAKPOINT"] = "rtdebug.rank.ray_worker.breakpointhook"
    wait = _waits(cb.wait, rank)
    record = RankState(
        ray_kv.connected(cb.secret), cb.session_id, rank, host, port, wait, cb.script,
        local_rank=ctx.get_local_rank(), node_rank=ctx.get_node_rank(), world_size=world,
    )  # fmt: skip
    record.set(
        cwd=cb.cwd,
        node_id=rc.get_node_id(),
        node_ip=node_ip,
        actor_id=rc.get_actor_id() or "",
        job_id=rc.get_job_id(),
        hostname=socket.gethostname(),
        machine=machine_id(),
    )
    _Worker.record = record
    endpoint = Endpoint(host, port, allow=cb.allow)
    record.connect(endpoint)  # the same transitions as a torchrun rank: a failed worker stays failed
    try:
        _start_endpoint(endpoint, cb.eager or wait)
    except Exception as exc:
        message = getattr(exc, "message", str(exc))
        record.failed(message, exit_code=None)
        print(f"rtdebug: rank {rank}: {message}", file=sys.stderr, flush=True)
        raise
    runtime.endpoint = _Worker.endpoint = endpoint
    runtime.record = record
    # all-stop on a private board: armed before `ready`, so a client that attaches at once is seen
    _Worker.allstop = ray_allstop.arm(rank, endpoint, record, getattr(cb, "all_stop", {}))
    record.ready(endpoint, debugpy_imported="debugpy" in sys.modules)
    runner = get_train_context().execution_context.training_thread_runner
    runner.run = _wrap_run(runner.run, cb, rank, wait, record, endpoint)


def _start_endpoint(endpoint, eager: bool, patience_s: float = 15.0) -> None:
    """Bind, giving a restarted group's predecessor on this node a moment to release the port."""
    from rtdebug.common.errors import HarnessError
    from rtdebug.rank.endpoint import warmup

    deadline = time.monotonic() + patience_s
    while True:
        try:
            return endpoint.start(eager=eager, warm_after=warmup.delay_s())
        except HarnessError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.5)


def _waits(wait: str, rank: int) -> bool:
    from rtdebug.common.ports import parse_rank_list

    if "=" in wait:  # mesh coordinates: the rank waits once its DeviceMesh places it (rtdebug.rank.meshes)
        return False
    ranks = parse_rank_list(wait)
    return ranks is None or rank in ranks


def _wrap_run(original, cb: RtdebugCallback, rank: int, wait: bool, record, endpoint):
    """The train function, in Ray's training thread: --wait first, --post-mortem on a raise."""

    def run(target):
        from rtdebug.rank.stacks.watch import KVWatch

        where = {k: record.entry.get(k) for k in ("hostname", "node_ip")}  # job-wide stacks, from the KV
        _Worker.dumps = KVWatch(ray_kv.connected(cb.secret), cb.session_id, rank, cb.secret, where).start()
        if _Worker.allstop is not None:  # the process group is up now: the workers' boards joined through its store
            _Worker.allstop.join(cb.session_id, cb.secret, record)

        def train():
            if _Worker.dumps is not None:  # job-wide stacks: Ray's training thread is this rank's "main" one
                _Worker.dumps.main_ident = threading.get_ident()
            if wait:
                print(
                    f"rtdebug: rank {rank} waiting for a debugger on {endpoint.host}:{endpoint.port}",
                    file=sys.stderr,
                    flush=True,
                )
                endpoint.wait_for_client()
            try:
                return target()
            except BaseException as exc:
                record.failed(f"{type(exc).__name__}: {exc}")
                if cb.post_mortem and not isinstance(exc, KeyboardInterrupt):
                    postmortem.handle(endpoint, exc, cb.post_mortem_wait_s, rank)
                raise

        return original(train)

    return run


def _raise_ray_pg_timeout(timeout_s: float) -> None:
    """Ray's distributed path passes ``TorchConfig.timeout_s`` (1800 s) to ``init_process_group``.

    Ray ships the setup function to the worker by reference, so the worker's module attribute is
    what runs; wrapping it there raises the timeout without touching the user's TorchConfig.
    """

    def patch(module) -> None:
        original = module._setup_torch_process_group
        if getattr(original, "_rtdebug", False):
            return

        def setup(*args, timeout_s: int = 1800, **kwargs):
            _Worker.pg_timeout_applied = applied = max(int(timeout_s), int(timeout_s_wanted))
            return original(*args, timeout_s=applied, **kwargs)

        setup._rtdebug = True  # type: ignore[attr-defined]
        module._setup_torch_process_group = setup

    timeout_s_wanted = timeout_s
    when_imported("ray.train.torch.config", patch)


def breakpointhook(*args, **kwargs) -> bool:
    """``breakpoint()`` in a worker: stop here if a client is attached, else say where to attach."""
    from rtdebug.rank.api import stop_in

    return stop_in(sys._getframe(1), os.environ.get("RANK", "?"))
