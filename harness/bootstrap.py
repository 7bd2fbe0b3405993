"""Per-rank entry point: ``python -m harness.bootstrap [-m] target [args]``.

torchrun starts this in every rank. It reads torchrun's variables, opens the
rank's debug endpoint on ``base + RANK``, registers the rank, arms the
local-mode fixes, optionally waits for a client, then runs the user's program
as ``__main__`` exactly as ``python script.py`` would (script dir on sys.path,
sys.argv as the script expects). ``rtdebug run`` uses the same path for rank 0.
"""

from __future__ import annotations

import os
import runpy
import sys
import time
import traceback
from typing import Any

from harness import lifetime, localmode, postmortem, publish, runtime
from harness.config import RankConfig, Target
from harness.endpoint import Endpoint
from harness.errors import HarnessError
from harness.ports import port_for_rank
from harness.procinfo import process_create_time
from harness.registry import SCHEMA_VERSION, RankWriter, Registry


def execute(target: Target) -> int:
    """Run the user's program as __main__; return its exit code (exceptions propagate)."""
    if target.module:
        sys.argv = [target.target, *target.args]
        sys.path.insert(0, os.getcwd())
        runner = lambda: runpy.run_module(target.target, run_name="__main__", alter_sys=True)  # noqa: E731
    else:
        path = os.path.abspath(target.target)
        sys.argv = [target.target, *target.args]
        sys.path.insert(0, os.path.dirname(path))
        runner = lambda: runpy.run_path(path, run_name="__main__")  # noqa: E731
    try:
        runner()
    except SystemExit as exc:
        code = exc.code
        if code is None:
            return 0
        if isinstance(code, int):
            return code
        print(code, file=sys.stderr)
        return 1
    return 0


def preimport(target: Target) -> list[str]:
    """Import the heavy modules the script will need before debugpy starts tracing.

    Measured here (Python 3.11): ``import torch, ray.train.torch`` after
    ``debugpy.listen`` took a median 8.4 s vs 3.5 s imported first (5 runs each).
    Breakpoints in these modules still bind (pydevd traces at call time).
    Only for --wait ranks: lazy and eager ranks run untraced until a client connects.
    """
    names = ["torch", "torch.distributed"]
    if not target.module:
        try:
            with open(target.target, encoding="utf-8", errors="replace") as f:
                source = f.read()
        except OSError:
            source = ""
        if "import ray" in source or "from ray" in source:
            names.append("ray.train.torch")
    done = []
    for name in names:
        try:
            __import__(name)
            done.append(name)
        except Exception:  # the script will hit (and report) the same error itself
            break
    return done


class RankRecord:
    """This rank's registry entry, kept current as its state changes."""

    publisher: Any = None  # harness.publish.Publisher of a multi-node job: the entry also goes to its store

    def __init__(
        self,
        registry: RankWriter,
        session_id: str,
        rank: int,
        host: str,
        port: int,
        wait: bool,
        script: str,
        local_rank: int = 0,
        node_rank: int = 0,
        world_size: int = 1,
    ) -> None:
        self.registry = registry
        now = time.time()
        pid = os.getpid()
        self.entry = {
            "schema_version": SCHEMA_VERSION,
            "kind": "rank",
            "session_id": session_id,
            "rank": rank,
            "local_rank": local_rank,
            "node_rank": node_rank,
            "world_size": world_size,
            "host": host,
            "port": port,
            "pid": pid,
            "create_time": process_create_time(pid) or now,
            "state": "starting",
            "lazy": True,
            "wait": wait,
            "attach_count": 0,
            "script": script,
            "cwd": os.getcwd(),
            "started_at": now,
            "updated_at": now,
            "exit_code": None,
            "error": None,
            "refused_count": 0,
        }
        registry.write_rank(self.entry)

    def set(self, **fields: Any) -> None:
        self.entry.update(fields, updated_at=time.time())
        try:
            self.registry.write_rank(self.entry)
        except OSError:
            pass  # the session dir was removed by `stop`; nothing left to record
        if self.publisher is not None:
            self.publisher.update(self.entry, final=fields.get("state") in ("exited", "failed"))


def serve_and_run(
    target: Target,
    record: RankRecord,
    endpoint: Endpoint | None,
    *,
    eager: bool,
    wait: bool,
    post_mortem: bool,
    post_mortem_wait_s: float,
    rank: int,
) -> int:
    """Shared by ranks and `rtdebug run`: open the endpoint, maybe wait, run, record the end."""
    from harness import stacks  # `rtdebug stacks` answers by signal, even from a rank blocked in C++

    # written at once: a rank stuck before `ready` (pre-imports, the endpoint) can be dumped too
    assert isinstance(record.registry, Registry)  # ranks of torchrun and `rtdebug run` write local files
    record.set(stacks=stacks.arm(record.registry.session_dir(str(record.entry["session_id"])), rank))
    if endpoint is not None:

        def on_state(state: str) -> None:
            if record.entry["state"] in ("exited", "failed"):  # a post-mortem client leaving: still failed
                state = record.entry["state"]
            record.set(state=state, lazy=endpoint.lazy, attach_count=endpoint.attach_count)

        endpoint.on_state = on_state
        endpoint.label = f"rank {rank}"
        endpoint.on_refused = lambda: record.set(refused_count=endpoint.refused_count)
        if wait:  # the client attaches before the script runs, so its imports would be traced; an eager
            preimport(target)  # rank without --wait stays untraced until a client comes (harness.tracing)
        endpoint.start(eager=eager or wait)
        runtime.endpoint = endpoint
        record.set(state="ready", lazy=endpoint.lazy)
        if wait:
            print(
                f"rtdebug: rank {rank} waiting for a debugger on {endpoint.host}:{endpoint.port}",
                file=sys.stderr,
                flush=True,
            )
            endpoint.wait_for_client()
    else:
        record.set(state="ready")
    try:
        code = execute(target)
    except BaseException as exc:  # the user's program failed: report it like python would
        message = localmode.explain(exc)
        if message is not None:
            print(f"rtdebug: rank {rank}: {message}", file=sys.stderr, flush=True)
        else:
            traceback.print_exception(type(exc), exc, exc.__traceback__)
        record.set(state="failed", exit_code=1, error=message or f"{type(exc).__name__}: {exc}")
        if post_mortem and not isinstance(exc, KeyboardInterrupt):
            postmortem.handle(endpoint, exc, post_mortem_wait_s, rank)
        return 130 if isinstance(exc, KeyboardInterrupt) else 1
    record.set(state="exited" if code == 0 else "failed", exit_code=code)
    return code


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        cfg = RankConfig.from_env()
        module = bool(argv) and argv[0] == "-m"
        if module:
            argv = argv[1:]
        if not argv:
            raise HarnessError("harness.bootstrap needs a script or -m module", 2)
        target = Target(argv[0], argv[1:], module=module)
        rank = int(os.environ["RANK"])
        local_rank = int(os.environ.get("LOCAL_RANK", "0"))
        world = int(os.environ.get("WORLD_SIZE", "1"))
        local_world = int(os.environ.get("LOCAL_WORLD_SIZE", "1"))
        port = port_for_rank(cfg.port_base, rank)
        os.environ.update(localmode.ray_env(os.environ))
        localmode.install(cfg.pg_timeout_s)
        if cfg.force_local:
            from harness import forcelocal

            forcelocal.install()
        # SIGTERM keeps its default action: a rank blocked inside a C++ collective could not run a
        # Python handler, and the launcher marks the ranks' entries ended after teardown anyway.
        records: list[RankRecord] = []

        def launcher_gone() -> None:
            for r in records:
                r.set(state="failed", error="launcher gone")

        lifetime.guard_rank(launcher_gone)
        record = RankRecord(
            Registry(cfg.registry_dir),
            cfg.session_id,
            rank,
            cfg.host,
            port,
            cfg.waits(rank),
            target.display,
            local_rank=local_rank,
            node_rank=int(os.environ.get("GROUP_RANK", rank // max(local_world, 1))),
            world_size=world,
        )
        records.append(record)
        publish.attach(record, rank, local_rank)
        try:
            return serve_and_run(
                target,
                record,
                Endpoint(cfg.host, port, allow=cfg.allow),
                eager=cfg.eager,
                wait=cfg.waits(rank),
                post_mortem=cfg.post_mortem,
                post_mortem_wait_s=cfg.post_mortem_wait_s,
                rank=rank,
            )
        except HarnessError as exc:  # e.g. the port was taken between the launcher's check and now
            record.set(state="failed", exit_code=exc.exit_code, error=exc.message)
            raise
    except HarnessError as exc:
        print(f"rtdebug: rank {os.environ.get('RANK', '?')}: {exc.message}", file=sys.stderr, flush=True)
        return exc.exit_code
    except KeyError as exc:
        print(f"rtdebug: harness.bootstrap must run under torchrun ({exc.args[0]} is not set)", file=sys.stderr)
        return 2


if __name__ == "__main__":
    # Re-enter as module harness.bootstrap, not __main__, so the attach configs' rule
    # {"module": "harness", "include": false} hides these frames from the user's call stack.
    from harness.bootstrap import main as _main

    sys.exit(_main())
