"""``rtdebug run``: a one-process session whose rank 0 is this process (the launcher and the rank at once).

The same lifecycle as ``rtdebug torchrun`` (``rtdebug.launcher.session``): reserve the port, write the
session entry, run, record the end. The rank's part -- endpoint, registry entry, the script as
``__main__`` -- is ``rtdebug.rank.bootstrap.run_in_launcher``, this package's one way into the rank
package. The environment the script and any Ray workers need is computed once and applied once.

Stopped (``rtdebug stop``, SIGTERM, SIGHUP), the process records ``stopped`` and then ends by that
signal as plain ``python script.py`` would: no Python shutdown running into Ray's or torch's C++
threads (which aborted the process, exit 134, when a ``SystemExit`` unwound through them).
"""

from __future__ import annotations

import dataclasses
import os
import signal
import sys
from collections.abc import Mapping
from typing import Any

from rtdebug.capsule import write as capsule_write
from rtdebug.common import rankenv
from rtdebug.common.config import RankConfig, ReplayTarget, SingleRunOptions, Target, check_host
from rtdebug.common.errors import usage
from rtdebug.common.imports import when_imported
from rtdebug.common.ports import check_ports_free, port_for_rank
from rtdebug.launcher import capture, multinode, ray_driver, replaying
from rtdebug.launcher.session import SessionRun
from rtdebug.registry.entry import new_session_id, session_entry
from rtdebug.registry.files import Registry

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


def config(opts: SingleRunOptions, replay: ReplayTarget | None = None) -> tuple[Target, RankConfig]:
    if opts.host == multinode.AUTO:
        raise usage(
            "--host auto picks the address toward a multi-node job's rendezvous host: "
            "it is for `rtdebug torchrun --debug-host auto`"
        )
    cfg = opts.rank_config(new_session_id(), host=opts.host, wait="all" if opts.wait else "none", replay=replay)
    target = Target(opts.target, list(opts.args), module=opts.module)
    if cfg.capture_dir:
        cfg = dataclasses.replace(
            cfg,
            capture_dir=capture.prepare(cfg.capture_dir, [0], "", 1),
            launch=capture.launch_facts("run", target, cfg.session_id),
        )
    return target, cfg


def environment(cfg: RankConfig, target: Target, opts: SingleRunOptions, env: Mapping[str, str]) -> dict[str, str]:
    """Everything this process's environment gains: Ray local mode's switch, and what Ray Train
    workers (``num_workers > 0``) need to get endpoints of their own (``rtdebug.launcher.ray_driver``)."""
    port = port_for_rank(cfg.port_base, 0)
    out = rankenv.ray_env(env)
    out.update(ray_driver.driver_env(cfg, target.display, port, opts.debug_port_base, opts.ray_address, env))
    return out


def run_single(opts: SingleRunOptions, replay: ReplayTarget | None = None) -> int:
    """``rtdebug run`` (rank 0), or with ``replay`` ``rtdebug replay`` (rank R of a capsule, alone)."""
    from rtdebug.rank import bootstrap  # the launcher's one entry into the rank package: rank 0 runs here

    target, cfg = config(opts, replay)
    added = environment(cfg, target, opts, os.environ)
    if replay is not None:
        added.update(replaying.prepare(replay))  # the rank's variables; the scratch folder made, cwd set
    os.environ.update(added)
    rank = replay.rank if replay is not None else 0
    bootstrap.arm_fixes(cfg, rank)
    when_imported("ray._private.utils", _keep_our_sigterm_handler)
    if rankenv.V2_VAR in added:
        print("rtdebug: set RAY_TRAIN_V2_ENABLED=1 (Ray Train local mode needs V2)", file=sys.stderr)
    if bootstrap.under_debugger():
        # F5 through rtdebug: VS Code's debugpy owns breakpoints and uncaught exceptions, so the
        # script's exceptions propagate to it untouched.
        print("rtdebug: already under a debugger; running the script without a second listener", file=sys.stderr)
        from rtdebug.rank.execute import execute  # the script alone, as python runs it

        return execute(target)
    check_host(cfg.host)
    port = port_for_rank(cfg.port_base, 0)
    check_ports_free([port], cfg.host)
    entry = _entry(cfg, target, port)
    if replay is not None:
        entry.update(replaying.entry_fields(replay))
    run = SessionRun(Registry(), entry)
    run.open()
    what = replaying.start_words(replay) if replay is not None else "1 rank"
    print(
        f"rtdebug: session {cfg.session_id} starting ({what}, debug endpoint {cfg.host}:{port}; "
        f"attach: rtdebug attach --session {cfg.session_id} --rank {rank})",
        file=sys.stderr,
        flush=True,
    )
    code = 1
    try:
        with run.signals(lambda signum, frame: _end_by_signal(run, signum, frame), STOP_SIGNALS):
            place = replaying.place(replay) if replay is not None else {}
            code = bootstrap.run_in_launcher(target, cfg, run.registry, port, **place)
    finally:
        run.close(code)
    return code


def _entry(cfg: RankConfig, target: Target, port: int) -> dict[str, Any]:
    return session_entry(
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
        pg_timeout_s=cfg.pg_timeout_s,  # the default of groups made without timeout= (ps shows it)
        pg_timeout_source="--pg-timeout",
        **ray_driver.session_fields(),
    )


def _end_by_signal(run: SessionRun, signum: int, frame: Any) -> None:
    """Record ``stopped``, then end by ``signum`` itself, as an unhandled SIGTERM/SIGHUP ends ``python``.
    Ctrl-C stays Python's KeyboardInterrupt (the script may catch it); the session is ``stopped`` either way,
    and a capsule this process writes ends ``interrupted``."""
    capsule_write.interrupted(signum)
    if signum == signal.SIGINT:
        signal.default_int_handler(signum, frame)
    if run.closing:
        return  # the job is ending already; its record is being written
    state = run.close(128 + signum)
    print(f"rtdebug: session {run.session_id} {state} (signal {signum})", file=sys.stderr, flush=True)
    signal.signal(signum, signal.SIG_DFL)
    os.kill(os.getpid(), signum)


def _keep_our_sigterm_handler(utils: Any) -> None:
    """``ray.init()`` in the script installs ``sys.exit(signum)`` as the driver's SIGTERM handler, whose
    ``SystemExit`` unwinding through Ray's and torch's threads aborted the driver (exit 134) on ``rtdebug
    stop``. While rtdebug's handler is installed, Ray keeps it (the processes Ray started end with the
    driver: ``stop`` ends the whole tree)."""
    original = utils.set_sigterm_handler

    def set_sigterm_handler(handler: Any) -> None:
        if getattr(signal.getsignal(signal.SIGTERM), "rtdebug_session", False):
            return
        original(handler)

    utils.set_sigterm_handler = set_sigterm_handler
