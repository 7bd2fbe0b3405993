"""``rtdebug torchrun``: the real torchrun with the harness bootstrap in every rank.

Every torchrun flag passes through untouched; the harness only swaps the
training script for ``-m rtdebug.rank.bootstrap <script>``. Before starting, it
reserves the ports of this node's ranks in the registry (under its lock) and
checks that they are free. torchrun runs in its own process group so that the
launcher alone decides teardown: Ctrl-C, SIGTERM or SIGHUP (terminal closed) ->
SIGTERM to torchrun (which stops its workers) -> SIGKILL to whatever is left.
When the launcher itself is killed, ``rtdebug.common.lifetime``'s guards end the rest.
The agent is reaped only after teardown has taken its process tree and group, so
no pid there can have been reused by then.

A multi-node job's ranks publish into its store, signed with the job's secret
(``rtdebug.registry.signing``): the user's ``RTDEBUG_JOB_SECRET``/``_FILE``, else the per-user
default secret file (the same on every node of a shared home), else a random one; kept 0600 in the
session dir, handed to the ranks in their environment.

One torch import on the launch path: the launcher needs torch for torchrun's own
parser, so it forks the agent (``rtdebug.launcher.agent``) instead of starting a second
interpreter that imports torch again (1.5x plain torchrun to the first step).
Not importing torch here at all would mean re-implementing torchrun's option
parsing; forking keeps its exact errors. Hence no CUDA call in the launcher.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from typing import Any

from rtdebug.common import lifetime, rankenv
from rtdebug.common.config import RankConfig, Target, check_host
from rtdebug.common.errors import HarnessError, usage
from rtdebug.common.ports import check_ports_free, is_port_free, port_holder, ports_for_ranks
from rtdebug.common.procinfo import process_create_time
from rtdebug.launcher import agent, capture, multinode
from rtdebug.launcher.session import SessionRun
from rtdebug.registry import signing
from rtdebug.registry.c10d import ENV_STORE, ENV_WATCH
from rtdebug.registry.entry import ATTACHABLE_STATES, session_entry
from rtdebug.registry.files import Registry
from rtdebug.registry.table import format_table

READY_LINE = "rtdebug: all {n} local ranks ready (session {sid})"
START_LINE = "rtdebug: session {sid} starting"
DAP_EXIT_S = 1.0  # the job's DAP endpoint ends within 0.2 s of a SIGTERM (rtdebug.dap.server)


@dataclass
class TorchrunPlan:
    """What the launcher will start: torchrun's own options, the user's target, this node's ranks."""

    torchrun_options: list[str]
    target: Target
    nnodes: str
    nproc_per_node: int
    node_rank: int | None
    local_ranks: list[int]  # global ranks whose ports this node must own
    store: str | None = None  # c10d rendezvous store of a multi-node job (rtdebug.launcher.multinode)
    rdzv_id: str | None = None
    watch_peers: bool = False  # a lost peer node ends this one (rtdebug.launcher.multinode.fixed_job)
    dap_port: int | None = None  # --dap-port: the job's DAP endpoint, served beside the launcher

    @property
    def max_world_size(self) -> int:
        return max_nodes_of(self.nnodes) * self.nproc_per_node

    def torchrun_args(self) -> list[str]:
        inner = ["-m", "rtdebug.rank.bootstrap"] + (["-m"] if self.target.module else [])
        return [*self.torchrun_options, *inner, self.target.target, *self.target.args]


def max_nodes_of(nnodes: str) -> int:
    """torchrun's --nnodes (``N`` or ``MIN:MAX``) -> MAX, as torchrun itself reads it."""
    from torch.distributed.run import parse_min_max_nnodes

    try:
        return parse_min_max_nnodes(nnodes)[1]
    except (RuntimeError, ValueError) as exc:
        raise usage(f"argument --nnodes: {exc}") from None


def local_global_ranks(nproc: int, nnodes: str, node_rank: int, static: bool) -> tuple[list[int], int | None]:
    """Global ranks this node may run. Static rendezvous fixes them by node rank; dynamic
    rendezvous (c10d, etcd) assigns node ranks at run time, so reserve the whole range."""
    max_nodes = max_nodes_of(nnodes)
    if static or max_nodes == 1:
        nr = node_rank if max_nodes > 1 else 0
        return list(range(nr * nproc, (nr + 1) * nproc)), nr
    return list(range(max_nodes * nproc)), None


def plan_torchrun(parsed: argparse.Namespace, tokens: list[str]) -> TorchrunPlan:
    """Split ``tokens`` (everything after our own options) into torchrun's part and the target."""
    from torch.distributed.run import determine_local_world_size

    if parsed.no_python:
        raise usage("--no-python is not supported: the harness runs the rank's Python program itself")
    script_idx = len(tokens) - len(parsed.training_script_args) - 1
    options = [t for t in tokens[:script_idx] if t not in ("-m", "--module")]
    target = Target(parsed.training_script, list(parsed.training_script_args), module=parsed.module)
    try:
        nproc = determine_local_world_size(parsed.nproc_per_node)
    except ValueError as exc:
        raise usage(f"--nproc-per-node {parsed.nproc_per_node}: {exc}") from None
    static = parsed.rdzv_backend == "static" and not parsed.standalone
    ranks, node_rank = local_global_ranks(nproc, parsed.nnodes, parsed.node_rank, static)
    store = multinode.job_store(parsed, max_nodes_of(parsed.nnodes))
    return TorchrunPlan(
        options,
        target,
        parsed.nnodes,
        nproc,
        node_rank,
        ranks,
        store,
        parsed.rdzv_id,
        bool(store) and multinode.fixed_job(parsed),
        dap_port(getattr(parsed, "dap_port", None), ranks),
    )


def dap_port(port: int | None, ranks: list[int]) -> int | None:
    """``--dap-port``: a port, not one of the ranks' own (those are checked free with them, before start)."""
    if port is not None and not 1 <= port <= 65535:
        raise usage(f"--dap-port {port}: a TCP port, 1-65535")
    return port


class Launcher:
    def __init__(self, plan: TorchrunPlan, cfg: RankConfig, registry: Registry) -> None:
        self.plan, self.cfg, self.registry = plan, cfg, registry
        self.proc: agent.Agent | None = None
        self.dap: subprocess.Popen[bytes] | None = None  # --dap-port's server
        self.stopped_by: int | None = None  # the first signal that asked the job to stop

    def _session_entry(self, ports: list[int]) -> dict[str, Any]:
        return session_entry(
            self.cfg.session_id,
            "torchrun",
            script=self.plan.target.display,
            nnodes=self.plan.nnodes,
            nproc_per_node=self.plan.nproc_per_node,
            node_rank=self.plan.node_rank,
            host=self.cfg.host,
            port_base=self.cfg.port_base,
            ports=ports,
            wait=self.cfg.wait,
            pg_timeout_s=self.cfg.pg_timeout_s,  # the default of groups made without timeout= (ps shows it)
            pg_timeout_source="--pg-timeout",
            **({"store": self.plan.store, "rdzv_id": self.plan.rdzv_id} if self.plan.store else {}),
        )

    def environment(self) -> dict[str, str]:
        env = dict(os.environ)
        env.pop("DEBUGPY_RUNNING", None)  # or ranks under a debugged launcher skip their own listen
        env.update(rankenv.ray_env(env))
        # Only NCCL reads the heartbeat variable: set it GPU or not, so the launcher never
        # initialises CUDA before forking the agent (rtdebug.launcher.agent).
        env.update(rankenv.nccl_env(self.cfg.pg_timeout_s, True, env))
        env.update(self.cfg.to_env())
        env.update(lifetime.launcher_env())
        env.setdefault("PYTHONUNBUFFERED", "1")
        if "PYTHONSAFEPATH" not in env:  # `-m rtdebug.rank.bootstrap` never resolves to the job's cwd
            env.update(PYTHONSAFEPATH="1", RTDEBUG_SET_SAFEPATH="1")  # the rank removes both (bootstrap)
        return env

    def run(self) -> int:
        check_host(self.cfg.host)
        ports = ports_for_ranks(self.cfg.port_base, self.plan.local_ranks)
        env = self.environment()  # raises before anything is reserved
        # the user's secret, else the per-user default (shared home: the same on every node); a bad file: before too
        supplied = signing.job_secret() if self.plan.store else None
        self.registry.ensure()
        env["RTDEBUG_REGISTRY_DIR"] = str(self.registry.root)
        if self.plan.store:
            env[ENV_STORE] = self.plan.store  # the ranks publish themselves there (rtdebug.rank.publish)
            env[ENV_WATCH] = "1" if self.plan.watch_peers else "0"
        if self.plan.dap_port in ports:
            raise usage(f"--dap-port {self.plan.dap_port} is one of the ranks' debug ports ({ports[0]}-{ports[-1]})")
        check_ports_free(ports, self.cfg.host)
        if self.plan.dap_port is not None and not is_port_free(self.plan.dap_port, "127.0.0.1"):
            holder = port_holder(self.plan.dap_port) or "an unknown process"
            raise HarnessError(f"--dap-port {self.plan.dap_port} is already in use by {holder}; pick another")
        session = SessionRun(self.registry, self._session_entry(ports))
        session.open()
        sid = self.cfg.session_id
        if self.plan.store:  # the ranks sign what they publish into the job's store
            env[signing.ENV_SECRET] = signing.ensure_secret(self.registry.session_dir(sid), supplied)
        print(
            START_LINE.format(sid=sid) + f" ({len(self.plan.local_ranks)} local ranks, "
            f"debug ports {ports[0]}-{ports[-1]} on {self.cfg.host})",
            flush=True,
        )
        if "RAY_TRAIN_V2_ENABLED" not in os.environ:
            print("rtdebug: set RAY_TRAIN_V2_ENABLED=1 for the ranks (Ray Train local mode needs V2)", flush=True)
        code = 1
        with session.signals(self._forward_stop, (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)):
            try:
                # before any thread of ours starts; torchrun's failure summary names the user's script
                self.proc = agent.start(self.plan.torchrun_args(), env, name=self.plan.target.display)
                pid = self.proc.pid
                session.update(state="running", agent_pid=pid, agent_create_time=process_create_time(pid))
                threading.Thread(target=self._announce_ready, daemon=True).start()
                self._start_dap()
                from rtdebug.launcher import hangwatch  # its stack modules load after the fork, beside the agent

                hangwatch.start(self.registry, sid, self.proc, self.cfg)  # grouped stacks on failure / no progress
                code = self.proc.wait()  # the agent stays unreaped until teardown has taken its tree
            finally:
                self._teardown()
                if self.cfg.capture_dir and self.stopped_by is not None:  # the capsule says it was interrupted
                    ran = [r["rank"] for r in self.registry.ranks(sid)]  # the ranks that ran here
                    capture.interrupted(self.cfg.capture_dir, ran, self.stopped_by)
                state = session.close(code)
                print(f"rtdebug: session {sid} {state} (exit code {code})", flush=True)
                self._end_dap()
        return code

    def _start_dap(self) -> None:
        """``--dap-port``: ``rtdebug dap`` for this session, as the launcher's child. It carries no session
        id in its environment, so a stop never signals it: a ``terminate`` it serves is that stop, and it
        answers its client once the stop is done; it ends itself once the session is over."""
        if self.plan.dap_port is None:
            return
        env = dict(os.environ, RTDEBUG_REGISTRY_DIR=str(self.registry.root))
        env.pop("RTDEBUG_SESSION", None)
        argv = [sys.executable, "-m", "rtdebug", "dap", "--session", self.cfg.session_id]
        self.dap = subprocess.Popen([*argv, "--port", str(self.plan.dap_port)], env=env, stdin=subprocess.DEVNULL)

    def _end_dap(self) -> None:
        """End and reap the DAP endpoint; one serving a ``terminate`` (the stop that ends this launcher)
        finishes that stop first, so it is left to tell its client and exit on its own."""
        if self.dap is not None:
            try:
                self.dap.terminate()  # it tells its clients the session is over, then exits
                self.dap.wait(timeout=DAP_EXIT_S)
            except subprocess.TimeoutExpired:
                pass

    def _forward_stop(self, signum: int, frame: Any) -> None:
        """Ctrl-C, SIGTERM, SIGHUP: torchrun's agent stops its workers; teardown ends what is left."""
        if self.stopped_by is None:
            self.stopped_by = signum
        if self.proc is not None:
            self.proc.send_signal(signal.SIGTERM)

    def _teardown(self) -> None:
        """End what the agent left. Its tree and process group are taken while the agent is still this
        process's unreaped child (alive or a zombie), so its pid and group id name no other process;
        only then is it reaped. psutil checks each process's create time again before signalling it."""
        if self.proc is None:
            return
        if self.proc.poll() is None:
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                pass
        from rtdebug.common import processes  # psutil: at the end only, not on the way to the ranks

        pid = self.proc.pid
        left = {p.pid: p for p in processes.tree([pid]) + processes.group_members(pid)}
        if self.proc.poll() is not None:
            left.pop(pid, None)
            self.proc.reap()
        if left:
            processes.terminate(list(left.values()), grace_s=5)
        self.proc.reap()

    def _announce_ready(self) -> None:
        want = set(self.plan.local_ranks) if self.plan.node_rank is not None else None
        n_local = self.plan.nproc_per_node
        while self.proc is not None and self.proc.poll() is None:
            ranks = [r for r in self.registry.ranks(self.cfg.session_id) if r["state"] in ATTACHABLE_STATES]
            mine = [r for r in ranks if want is None or r["rank"] in want]
            if len(mine) >= n_local:
                print(format_table(mine, self.cfg.session_id), flush=True)
                print(READY_LINE.format(n=len(mine), sid=self.cfg.session_id), flush=True)
                return
            time.sleep(0.1)
