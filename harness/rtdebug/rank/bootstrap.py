"""Per-rank entry point: ``python -m rtdebug.rank.bootstrap [-m] target [args]``.

torchrun starts this in every rank. It reads torchrun's variables, opens the rank's debug endpoint on
``base + RANK``, registers the rank (``record``), arms the local-mode fixes, optionally waits for a
client, then runs the user's program as ``__main__`` exactly as ``python script.py`` would
(``execute``). ``rtdebug run`` runs rank 0 through ``run_in_launcher``, the one function the launcher
package calls here.

The launcher starts ranks with ``PYTHONSAFEPATH=1`` (Python 3.11+), so ``-m rtdebug.rank.bootstrap``
is found in the installed package, never in a same-named folder in the job's working directory;
``execute`` puts the script's directory (or, for ``-m``, the working directory) on ``sys.path`` itself.
"""

from __future__ import annotations

import os
import sys

from rtdebug.common import lifetime, log, rankenv
from rtdebug.common.config import RankConfig, Target
from rtdebug.common.errors import HarnessError
from rtdebug.common.ports import port_for_rank
from rtdebug.rank import allstop, allstop_nodes, postmortem, publish, runtime, startup
from rtdebug.rank.collectives import recorder
from rtdebug.rank.endpoint import Endpoint, debugger_active, warmup
from rtdebug.rank.execute import execute, preimport, print_failure
from rtdebug.rank.localmode import fixes
from rtdebug.rank.state import RankState
from rtdebug.registry.files import Registry

SAFEPATH_VAR = "RTDEBUG_SET_SAFEPATH"  # "1": the launcher set PYTHONSAFEPATH, not the user


def arm_fixes(cfg: RankConfig, rank: int) -> None:
    """The local-mode fixes, armed before the script runs (they apply when torch / Ray are imported)."""
    startup.fixes(cfg, rank)


def under_debugger() -> bool:
    """True when this process already runs under a debugger (F5 of ``python -m rtdebug run``)."""
    return debugger_active()


def serve_and_run(target: Target, record: RankState, endpoint: Endpoint, cfg: RankConfig) -> int:
    """Open the endpoint, maybe wait for a client, run the script, record how it ended."""
    rank = int(record.entry["rank"])
    wait = cfg.waits(rank)
    # written at once: a rank stuck before `ready` (pre-imports, the endpoint) can be dumped too
    assert isinstance(record.registry, Registry)  # ranks of torchrun and `rtdebug run` write local files
    sdir = record.registry.session_dir(str(record.entry["session_id"]))
    record.set(stacks=startup.dumps(sdir, rank), collectives=startup.record(sdir, rank))
    if wait:  # the client attaches before the script runs, so its imports would be traced; an eager
        preimport(target)  # rank without --wait stays untraced until a client comes (rtdebug.rank.endpoint.tracing)
    startup.serve(record, endpoint, eager=cfg.eager or wait, warm_after=warmup.delay_s())
    runtime.allstop = allstop.arm(sdir, rank, endpoint, record, recorder.hold_with)  # debug state, all-stop
    allstop_nodes.arm(runtime.allstop, record.publisher, sdir, str(record.entry["session_id"]))  # multi-node: job-wide
    record.ready(endpoint)
    if wait:
        print(f"rtdebug: rank {rank} waiting for a debugger on {endpoint.host}:{endpoint.port}", file=sys.stderr)
        sys.stderr.flush()
        endpoint.wait_for_client()
    try:
        code = execute(target)
    except BaseException as exc:  # the user's program failed: report it as python would
        log.swallowed("rank.bootstrap: the user's program failed: report it as python would")
        return failed(exc, record, endpoint, cfg)
    record.exited(code)
    return code


def failed(exc: BaseException, record: RankState, endpoint: Endpoint | None, cfg: RankConfig) -> int:
    """Report the script's exception (one line for a known local-mode mistake), then maybe post-mortem."""
    rank = int(record.entry["rank"])
    if isinstance(exc, KeyboardInterrupt):  # the user stopped the script (Ctrl-C): it ended, as python's does
        print_failure(exc)
        record.stopped(130)
        return 130
    message = fixes.explain(exc)
    if message is not None:
        print(f"rtdebug: rank {rank}: {message}", file=sys.stderr, flush=True)
    else:
        print_failure(exc)
    record.failed(message or f"{type(exc).__name__}: {exc}")
    if cfg.post_mortem:
        postmortem.handle(endpoint, exc, cfg.post_mortem_wait_s, rank)
    return 1


def run_in_launcher(
    target: Target,
    cfg: RankConfig,
    registry: Registry,
    port: int,
    rank: int = 0,
    world_size: int = 1,
    local_rank: int = 0,
    node_rank: int = 0,
) -> int:
    """``rtdebug run``: rank 0 in the launcher's own process, registered in ``registry``; ``rtdebug replay``:
    the capsule's rank ``rank`` of ``world_size`` (its local and node rank as recorded), alone."""
    record = RankState(
        registry,
        cfg.session_id,
        rank,
        cfg.host,
        port,
        cfg.waits(rank),
        target.display,
        local_rank=local_rank,
        node_rank=node_rank,
        world_size=world_size,
    )
    return serve_and_run(target, record, Endpoint(cfg.host, port, allow=cfg.allow), cfg)


def _target(argv: list[str]) -> Target:
    module = bool(argv) and argv[0] == "-m"
    argv = argv[1:] if module else argv
    if not argv:
        raise HarnessError("rtdebug.rank.bootstrap needs a script or -m module", 2)
    return Target(argv[0], argv[1:], module=module)


def _torchrun_record(cfg: RankConfig, target: Target, rank: int) -> RankState:
    """Register this torchrun rank (its global rank, local rank, node and world from torchrun's variables)."""
    local_world = int(os.environ.get("LOCAL_WORLD_SIZE", "1"))
    return RankState(
        Registry(cfg.registry_dir),
        cfg.session_id,
        rank,
        cfg.host,
        port_for_rank(cfg.port_base, rank),
        cfg.waits(rank),
        target.display,
        local_rank=int(os.environ.get("LOCAL_RANK", "0")),
        node_rank=int(os.environ.get("GROUP_RANK", rank // max(local_world, 1))),
        world_size=int(os.environ.get("WORLD_SIZE", "1")),
    )


def main(argv: list[str] | None = None) -> int:
    """A torchrun rank: returns the script's exit code; a setup mistake is one line and exit 2."""
    if os.environ.pop(SAFEPATH_VAR, None) == "1":
        os.environ.pop("PYTHONSAFEPATH", None)  # the user's own subprocesses start as they would without us
    if "RANK" not in os.environ:
        print("rtdebug: rtdebug.rank.bootstrap must run under torchrun (RANK is not set)", file=sys.stderr)
        return 2
    try:
        cfg = RankConfig.from_env()
        target = _target(list(sys.argv[1:] if argv is None else argv))
        rank = int(os.environ["RANK"])
        os.environ.update(rankenv.ray_env(os.environ))
        arm_fixes(cfg, rank)
        # SIGTERM keeps its default action: a rank blocked inside a C++ collective could not run a
        # Python handler, and the launcher marks the ranks' entries ended after teardown anyway.
        records: list[RankState] = []

        def launcher_gone() -> None:
            for r in records:
                r.failed("launcher gone", exit_code=None)

        lifetime.guard_rank(launcher_gone)
        record = _torchrun_record(cfg, target, rank)
        records.append(record)
        publish.attach(record, rank, int(record.entry["local_rank"]))
        try:
            return serve_and_run(target, record, Endpoint(cfg.host, int(record.entry["port"]), allow=cfg.allow), cfg)
        except HarnessError as exc:  # e.g. the port was taken between the launcher's check and now
            record.failed(exc.message, exit_code=exc.exit_code)
            raise
    except HarnessError as exc:
        print(f"rtdebug: rank {os.environ.get('RANK', '?')}: {exc.message}", file=sys.stderr, flush=True)
        return exc.exit_code


if __name__ == "__main__":
    # Re-enter as module rtdebug.rank.bootstrap, not __main__, so the attach configs' rule
    # {"module": "rtdebug", "include": false} hides these frames from the user's call stack.
    from rtdebug.rank.bootstrap import main as _main

    sys.exit(_main())
