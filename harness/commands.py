"""What each subcommand does, behind the argument parsing in ``cli``."""

from __future__ import annotations

import os
import signal
import sys
import time

from harness import localmode, multinode
from harness.config import RankConfig, Target, check_host
from harness.errors import usage
from harness.launcher import Launcher, plan_torchrun
from harness.ports import check_ports_free, parse_rank_list, port_for_rank
from harness.registry import Registry, new_session_id, session_entry


def run_single(args) -> int:
    """``rtdebug run``: rank 0 of a one-process session, in this process."""
    # the rank's modules, imported here and not at the top: `rtdebug torchrun` never needs them
    from harness import bootstrap
    from harness.endpoint import Endpoint, debugger_active

    if args.host == multinode.AUTO:
        raise usage(
            "--host auto picks the address toward a multi-node job's rendezvous host: "
            "it is for `rtdebug torchrun --debug-host auto`"
        )
    target = Target(args.target, list(args.args), module=args.module)
    cfg = RankConfig(
        session_id=new_session_id(),
        port_base=args.port,
        host=args.host,
        allow=args.allow,
        wait="all" if args.wait else "none",
        eager=args.eager,
        post_mortem=args.post_mortem,
        post_mortem_wait_s=args.post_mortem_wait,
        pg_timeout_s=args.pg_timeout,
        force_local=args.force_local,
    )
    added = localmode.ray_env(os.environ)
    os.environ.update(added)
    localmode.install(cfg.pg_timeout_s)
    if cfg.force_local:
        from harness import forcelocal

        forcelocal.install()
    if added:
        print("rtdebug: set RAY_TRAIN_V2_ENABLED=1 (Ray Train local mode needs V2)", file=sys.stderr)
    if debugger_active():
        # F5 through the harness: VS Code's debugpy owns breakpoints and uncaught exceptions, so the
        # script's exceptions propagate to it untouched.
        print("rtdebug: already under a debugger; running the script without a second listener", file=sys.stderr)
        return bootstrap.execute(target)
    check_host(cfg.host)
    port = port_for_rank(cfg.port_base, 0)
    check_ports_free([port], cfg.host)
    from harness import ray_driver  # Ray Train workers (num_workers > 0) get endpoints too

    os.environ.update(ray_driver.driver_env(cfg, target.display, port, args.debug_port_base, args.ray_address))
    reg = Registry()
    reg.ensure()
    reg.create_session(
        session_entry(
            cfg.session_id,
            "run",
            state="running",
            script=target.display,
            nnodes="1",
            nproc_per_node=1,
            node_rank=0,
            host=cfg.host,
            port_base=port,
            ports=[port],
            wait=cfg.wait,
            **ray_driver.session_fields(),
        )
    )
    signal.signal(signal.SIGTERM, lambda s, f: sys.exit(128 + s))
    code = 1
    try:
        record = bootstrap.RankRecord(reg, cfg.session_id, 0, cfg.host, port, args.wait, target.display)
        print(
            f"rtdebug: session {cfg.session_id} starting (1 rank, debug endpoint {cfg.host}:{port}; "
            f"attach: rtdebug attach --session {cfg.session_id} --rank 0)",
            file=sys.stderr,
            flush=True,
        )
        code = bootstrap.serve_and_run(
            target,
            record,
            Endpoint(cfg.host, port, allow=cfg.allow),
            eager=cfg.eager,
            wait=args.wait,
            post_mortem=cfg.post_mortem,
            post_mortem_wait_s=cfg.post_mortem_wait_s,
            rank=0,
        )
    finally:
        reg.update_session(
            cfg.session_id, state="exited" if code == 0 else "failed", exit_code=code, ended_at=time.time()
        )
    return code


def run_torchrun(parsed, tokens: list[str]) -> int:
    plan = plan_torchrun(parsed, tokens)
    host = multinode.resolve_debug_host(parsed.host, parsed)
    cfg = RankConfig(
        session_id=new_session_id(),
        port_base=parsed.port,
        host=host,
        allow=parsed.allow,
        wait=parsed.wait_ranks,
        eager=parsed.eager,
        post_mortem=parsed.post_mortem,
        post_mortem_wait_s=parsed.post_mortem_wait,
        pg_timeout_s=parsed.pg_timeout,
        force_local=parsed.force_local,
        check_collectives=parsed.check_collectives,
        hang_report_s=parsed.hang_report,
    )
    parse_rank_list(cfg.wait, plan.max_world_size)
    return Launcher(plan, cfg, Registry()).run()
