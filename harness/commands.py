"""What each subcommand does, behind the argument parsing in ``cli``."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from typing import Any

from harness import bootstrap, localmode, processes, vscode
from harness.config import RankConfig, Target, check_host
from harness.endpoint import Endpoint, debugger_active
from harness.errors import HarnessError, usage
from harness.launcher import Launcher, format_table, max_nodes_of, plan_torchrun
from harness.ports import check_ports_free, is_port_free, parse_rank_list, port_for_rank, port_holder
from harness.registry import SCHEMA_VERSION, Registry, new_session_id, session_entry

URI = "vscode://rtdebug.rtdebug-vscode/attach?session={sid}&rank={rank}"


def run_single(args) -> int:
    """``rtdebug run``: rank 0 of a one-process session, in this process."""
    target = Target(args.target, list(args.args), module=args.module)
    cfg = RankConfig(session_id=new_session_id(), port_base=args.port, host=args.host, allow=args.allow,
                     wait="all" if args.wait else "none", eager=args.eager, post_mortem=args.post_mortem,
                     post_mortem_wait_s=args.post_mortem_wait, pg_timeout_s=args.pg_timeout,
                     force_local=args.force_local)
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
    reg.create_session(session_entry(
        cfg.session_id, "run", state="running", script=target.display, nnodes="1", nproc_per_node=1, node_rank=0,
        host=cfg.host, port_base=port, ports=[port], wait=cfg.wait, **ray_driver.session_fields()))
    signal.signal(signal.SIGTERM, lambda s, f: sys.exit(128 + s))
    code = 1
    try:
        record = bootstrap.RankRecord(reg, cfg.session_id, 0, cfg.host, port, args.wait, target.display)
        print(f"rtdebug: session {cfg.session_id} starting (1 rank, debug endpoint {cfg.host}:{port}; "
              f"attach: rtdebug attach --session {cfg.session_id} --rank 0)", file=sys.stderr, flush=True)
        code = bootstrap.serve_and_run(target, record, Endpoint(cfg.host, port, allow=cfg.allow), eager=cfg.eager,
                                       wait=args.wait, post_mortem=cfg.post_mortem,
                                       post_mortem_wait_s=cfg.post_mortem_wait_s, rank=0)
    finally:
        reg.update_session(cfg.session_id, state="exited" if code == 0 else "failed", exit_code=code,
                           ended_at=time.time())
    return code


def run_torchrun(parsed, tokens: list[str]) -> int:
    plan = plan_torchrun(parsed, tokens)
    cfg = RankConfig(session_id=new_session_id(), port_base=parsed.port, host=parsed.host, allow=parsed.allow,
                     wait=parsed.wait_ranks, eager=parsed.eager, post_mortem=parsed.post_mortem,
                     post_mortem_wait_s=parsed.post_mortem_wait, pg_timeout_s=parsed.pg_timeout,
                     force_local=parsed.force_local, check_collectives=parsed.check_collectives,
                     hang_report_s=parsed.hang_report)
    parse_rank_list(cfg.wait, plan.max_world_size)
    return Launcher(plan, cfg, Registry()).run()


def ps(as_json: bool) -> int:
    reg = Registry()
    live = reg.live()
    if as_json:
        print(json.dumps({"schema_version": SCHEMA_VERSION, "registry": str(reg.root), "sessions": live}, indent=1))
        return 0
    if not live:
        print("no live rtdebug sessions")
        return 0
    for s in live:
        print(f"session {s['session_id']}  {s['mode']}  {s['script']}  state={s['state']}  "
              f"launcher pid {s['launcher_pid']}  ports {s['ports'][0]}-{s['ports'][-1]}")
        if s["ranks"]:
            print("  " + format_table(s["ranks"], s["session_id"]).replace("\n", "\n  "))
    return 0


def _world_size(session: dict[str, Any]) -> int:
    for r in session["ranks"]:
        return int(r["world_size"])
    return max_nodes_of(session["nnodes"]) * int(session["nproc_per_node"])


def attach(rank: int, session_id: str | None, timeout: float, as_json: bool, to_vscode: bool) -> int:
    reg = Registry()
    session = reg.find_session(session_id)
    sid = session["session_id"]
    world = _world_size(session)
    if not 0 <= rank < world:
        raise usage(f"rank {rank} is out of range: session {sid} has world size {world}")
    deadline = time.monotonic() + timeout
    while True:
        entry = next((r for r in reg.ranks(sid) if r["rank"] == rank), None)
        if entry is not None:
            # a failed rank that is still alive is waiting for a post-mortem client
            if entry["state"] in ("ready", "attached") or (entry["state"] == "failed" and reg.live_rank(entry)):
                break
            if entry["state"] in ("exited", "failed"):
                raise HarnessError(f"rank {rank} of session {sid} has {entry['state']} "
                                   f"(exit code {entry['exit_code']})")
        current = reg.read_session(sid)
        if current is None or current["state"] not in ("starting", "running"):
            raise HarnessError(f"session {sid} has ended")
        if time.monotonic() > deadline:
            raise HarnessError(f"timed out after {timeout:g}s waiting for rank {rank} of session {sid}")
        time.sleep(0.1)
    config = vscode.attach_config(f"{vscode.PREFIX}attach rank {rank} ({sid})", entry["host"], entry["port"],
                                  entry["cwd"])
    if as_json:
        print(json.dumps({"session_id": sid, "rank": rank, "host": entry["host"], "port": entry["port"],
                          "state": entry["state"], "configuration": config}, indent=1))
    else:
        print(f"{entry['host']}:{entry['port']}")
        print(json.dumps(config, indent=2))
    if to_vscode:
        uri = URI.format(sid=sid, rank=rank)
        code = shutil.which("code")
        if code is None:
            print(f"rtdebug: `code` is not on PATH; open this URI in VS Code: {uri}", file=sys.stderr)
        else:
            subprocess.run([code, "--open-url", uri], check=False)
    return 0


def _stop_one(reg: Registry, session: dict[str, Any]) -> None:
    sid = session["session_id"]
    ranks = session["ranks"]
    pids = [session["launcher_pid"]] + [r["pid"] for r in ranks if reg.live_rank(r)]
    procs = processes.tree(pids)
    launcher = next((p for p in procs if p.pid == session["launcher_pid"]), None)
    if launcher is not None and session["mode"] == "torchrun":
        processes.terminate([launcher], grace_s=20)  # its own teardown stops torchrun and the ranks
    left = [p for p in procs if p.is_running()]
    if left:
        processes.terminate(left, grace_s=5)
    deadline = time.monotonic() + 10
    busy = list(session["ports"])
    while busy and time.monotonic() < deadline:
        busy = [p for p in busy if not is_port_free(p, session["host"])]
        if busy:
            time.sleep(0.1)
    now = time.time()
    if reg.read_session(sid) is not None:
        reg.update_session(sid, state="stopped", ended_at=now)
        for r in reg.ranks(sid):
            if r["state"] in ("starting", "ready", "attached"):
                reg.write_rank(dict(r, state="exited", updated_at=now))
    if busy:
        raise HarnessError(f"session {sid} stopped, but port {busy[0]} is still held by "
                           f"{port_holder(busy[0]) or 'an unknown process'}")
    print(f"rtdebug: stopped session {sid} ({len(procs)} processes ended, ports "
          f"{session['ports'][0]}-{session['ports'][-1]} free)")


def stop(session_id: str | None, every: bool) -> int:
    reg = Registry()
    live = reg.live()
    if every:
        targets = live
    elif session_id is not None:
        targets = [reg.find_session(session_id)]
    elif len(live) == 1:
        targets = live
    elif not live:
        raise HarnessError("no live rtdebug session to stop")
    else:
        raise usage(f"{len(live)} live sessions; pick one with --session ID or use --all")
    for s in targets:
        _stop_one(reg, s)
    if every and not live:
        print("rtdebug: no live sessions")
    return 0
