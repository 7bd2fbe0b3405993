"""End to end, single process and the in-rank features: run, --wait/stop, breakpoint(), post-mortem."""

from __future__ import annotations

import ast
import json
import os
import re

import pytest

from support.dap import DAPClient
from support.jobs import read_ranks, rtdebug, wait_ranks
from support.paths import EXAMPLES, SCRIPTS, marker_line
from support.ports import port_free
from support.procs import alive
from support.sigs import default_dispositions
from support.wait import stays

pytestmark = pytest.mark.e2e


def test_run_single_process_breakpoint_and_result(job, registry_dir, port_base, tmp_path):
    script = EXAMPLES / "local_linear.py"
    line = marker_line(script, "local step")
    storage = ("--storage", str(tmp_path), "--name", "lin")
    j = job("run", "--port", str(port_base), "--wait", str(script), "--epochs", "5", *storage)
    sid = j.session_id()
    wait_ranks(registry_dir, sid, 1)
    c = DAPClient("127.0.0.1", port_base)
    c.attach({str(script): [line]})
    stopped = c.wait_stopped(120)
    frame = c.top_frame(stopped["threadId"])
    assert frame["line"] == line and frame["name"] == "train_func"
    assert c.evaluate("epoch", frame["id"]) == "0"
    assert c.evaluate("__import__('os').environ['RAY_TRAIN_V2_ENABLED']", frame["id"]) == "'1'"
    c.request("setBreakpoints", source={"path": str(script)}, breakpoints=[])
    c.continue_(stopped["threadId"])
    c.disconnect()
    assert j.wait(120) == 0, j.output()[-3000:]
    metrics = ast.literal_eval(re.search(r"final metrics: (\{.*\})", j.output()).group(1))
    assert metrics["epoch"] == 4 and 0 < metrics["loss"] < 30  # 5 SGD steps from ~29
    final = re.search(r"final checkpoint: (\S+)", j.output()).group(1)
    assert os.listdir(final) == ["model.pt"] and os.path.dirname(final) == str(tmp_path / "lin")
    assert port_free(port_base)
    # the same name again resumes from the last checkpoint, as a cluster's restore does
    again = job("run", "--port", str(port_base), str(script), "--epochs", "2", *storage)
    assert again.wait(120) == 0, again.output()[-3000:]
    assert f"resuming from {final}" in again.output()
    metrics = ast.literal_eval(re.search(r"final metrics: (\{.*\})", again.output()).group(1))
    assert metrics["epoch"] == 6


def test_wait_rank0_blocks_rank1_runs_then_stop_cleans_up(job, registry_dir, port_base):
    j = job(
        "torchrun",
        "--debug-port-base",
        str(port_base),
        "--wait",
        "0",
        "--nproc-per-node",
        "2",
        str(EXAMPLES / "plain_ddp.py"),
        "--epochs",
        "1000",
    )
    sid = j.session_id()
    ranks = wait_ranks(registry_dir, sid, 2)
    assert ranks[0]["wait"] is True and ranks[1]["wait"] is False
    assert ranks[0]["lazy"] is False and ranks[1]["lazy"] is True
    out = j.wait_output("rtdebug: all 2 local ranks ready")
    assert "ready (waiting)" in out
    # rank 0 blocks before user code, so no rank trains (rank 1 waits for it in init_process_group) ...
    # (a window in which a step would show: what is waited for is that nothing happens)
    stays(lambda: " epoch " not in j.output(), 3, "no rank trains before a client attaches to rank 0")
    # ... until a client attaches to rank 0: then both train
    c = DAPClient("127.0.0.1", port_base)
    c.attach()
    j.wait_output("rank 0 epoch 0", 60)
    c.disconnect()
    pids = [r["pid"] for r in ranks.values()] + [p.pid for p in j.descendants()]
    r = rtdebug("stop", "--session", sid)
    assert r.returncode == 0, r.stderr
    assert f"stopped session {sid}" in r.stdout
    j.wait(60)
    assert alive(pids) == []
    assert port_free(port_base) and port_free(port_base + 1)
    ps = json.loads(rtdebug("ps", "--json").stdout)
    assert all(s["session_id"] != sid for s in ps["sessions"])


def test_user_breakpoint_stops_only_named_rank(job, registry_dir, port_base):
    script = SCRIPTS / "user_breakpoint.py"
    j = job("torchrun", "--debug-port-base", str(port_base), "--nproc-per-node", "2", str(script))
    sid = j.session_id()
    wait_ranks(registry_dir, sid, 2)
    c = DAPClient("127.0.0.1", port_base + 1)
    c.attach()
    stopped = c.wait_stopped(60)
    frame = c.top_frame(stopped["threadId"])
    assert frame["name"] == "<module>" and c.evaluate("value", frame["id"]) == "10"
    assert "rank 0 breakpoint returned False" in j.wait_output("rank 0 breakpoint returned False")
    c.continue_(stopped["threadId"])
    j.wait_output("rank 1 breakpoint returned True")
    c.disconnect()
    assert j.wait(60) == 0


def test_post_mortem_keeps_failed_rank_attachable(job, registry_dir, port_base):
    script = SCRIPTS / "crash_rank1.py"
    raise_line = next(i for i, text in enumerate(script.read_text().splitlines(), 1) if "RAISE SITE" in text)
    j = job(
        "torchrun",
        "--debug-port-base",
        str(port_base),
        "--post-mortem",
        "--post-mortem-wait",
        "60",
        "--nproc-per-node",
        "2",
        str(script),
    )
    sid = j.session_id()
    j.wait_output("rank 1 failed; post-mortem: attach to")
    ranks = read_ranks(registry_dir, sid)
    assert ranks[1]["state"] == "failed" and "ZeroDivisionError" in ranks[1]["error"]
    ps = json.loads(rtdebug("ps", "--json").stdout)
    live = {r["rank"]: r["state"] for s in ps["sessions"] if s["session_id"] == sid for r in s["ranks"]}
    assert live[1] == "failed"
    r = rtdebug("attach", "--rank", "1", "--session", sid, "--json")  # failed but alive: attachable
    assert r.returncode == 0 and json.loads(r.stdout)["port"] == port_base + 1, r.stderr
    c = DAPClient("127.0.0.1", port_base + 1)
    config = json.loads(r.stdout)["configuration"]  # exactly what `rtdebug attach` hands a client
    c.attach(just_my_code=config["justMyCode"], rules=config["rules"])
    stopped = c.wait_stopped(60)
    assert stopped["reason"] == "exception"
    paths = [f.get("source", {}).get("path", "") for f in c.frames(stopped["threadId"])]
    # harness frames hidden, but the process's outermost frame (bootstrap run as __main__)
    assert paths[0] == str(script) and not [p for p in paths[:-1] if "/harness/" in p], paths
    frame = c.top_frame(stopped["threadId"])
    assert frame["line"] == raise_line and frame["name"] == "step"
    assert c.evaluate("batch", frame["id"]) == "0"
    c.continue_(stopped["threadId"])
    c.disconnect()
    code = j.wait(120)
    assert code != 0


def test_ray_data_single_process_works(job, registry_dir, port_base):
    j = job("run", "--port", str(port_base), str(SCRIPTS / "ray_data_single.py"))
    assert j.wait(300) == 0, j.output()[-3000:]
    assert "ray data total 45" in j.output()


def test_run_under_existing_debugger_starts_no_second_listener(tmp_path, registry_dir, port_base):
    """The F5 path: VS Code's debugpy launches `python -m rtdebug run`; breakpoints come from that debugger."""
    import os
    import subprocess
    import sys

    script = EXAMPLES / "local_linear.py"
    line = marker_line(script, "local step")
    log = open(tmp_path / "f5.log", "w+")
    p = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "debugpy",
            "--listen",
            f"127.0.0.1:{port_base}",
            "--wait-for-client",
            "-m",
            "rtdebug",
            "run",
            "--port",
            str(port_base + 1),
            str(script),
            "--epochs",
            "3",
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
        env=dict(os.environ, PYDEVD_DISABLE_FILE_VALIDATION="1"),
        preexec_fn=default_dispositions,
    )
    try:
        c = DAPClient("127.0.0.1", port_base)
        c.attach({str(script): [line]})
        stopped = c.wait_stopped(120)
        frame = c.top_frame(stopped["threadId"])
        assert frame["line"] == line and c.evaluate("epoch", frame["id"]) == "0"
        assert port_free(port_base + 1)  # no second listener
        c.request("setBreakpoints", source={"path": str(script)}, breakpoints=[])
        c.continue_(stopped["threadId"])
        c.disconnect()
        assert p.wait(120) == 0
    finally:
        p.kill()
    log.seek(0)
    out = log.read()
    assert "already under a debugger; running the script without a second listener" in out
    assert "final metrics: {'epoch': 2" in out


def test_run_module_target(job, port_base):
    j = job("run", "--port", str(port_base), "-m", "platform")
    assert j.wait(60) == 0
    assert "Linux" in j.output()


def test_ctrl_c_stops_everything(job, registry_dir, port_base):
    import signal

    j = job(
        "torchrun",
        "--debug-port-base",
        str(port_base),
        "--nproc-per-node",
        "2",
        str(EXAMPLES / "plain_ddp.py"),
        "--epochs",
        "1000",
    )
    sid = j.session_id()
    ranks = wait_ranks(registry_dir, sid, 2)
    pids = [r["pid"] for r in ranks.values()] + [p.pid for p in j.descendants()]
    j.proc.send_signal(signal.SIGINT)
    assert j.wait(60) != 0
    assert alive(pids) == []
    assert port_free(port_base) and port_free(port_base + 1)
    session = json.loads((registry_dir / sid / "session.json").read_text())
    assert session["state"] == "stopped"
    assert {r["state"] for r in read_ranks(registry_dir, sid).values()} == {"exited"}
