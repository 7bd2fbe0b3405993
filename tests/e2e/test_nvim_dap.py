"""A real nvim-dap in headless Neovim against a job's DAP endpoint (``rtdebug torchrun --dap-port``).

nvim-dap is not in this repository and CI cannot fetch it: set ``RTDEBUG_NVIM_DAP`` to a checkout of it (a tag
that supports your Neovim: 0.6.0 for Debian's Neovim 0.7.2) and have ``nvim`` on PATH; otherwise this test
skips and says so. ``RTDEBUG_NVIM_DAP_PYTHON`` (an nvim-dap-python checkout) adds the run with its adapter.
docs/other-editors.md records the last run.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import psutil
import pytest

from support.jobs import read_ranks, rtdebug, wait_ranks
from support.paths import EXAMPLES, ROOT, SCRIPTS, marker_line
from support.ports import port_free
from support.procs import alive, kill_tree
from support.sigs import default_dispositions
from support.wait import until

pytestmark = pytest.mark.e2e
NVIM_DAP = os.environ.get("RTDEBUG_NVIM_DAP", "")
NVIM_DAP_PYTHON = os.environ.get("RTDEBUG_NVIM_DAP_PYTHON", "")  # optional: nvim-dap-python's checkout
NVIM = shutil.which("nvim")
FULL = os.environ.get("RTDEBUG_FULL") == "1"
PLAIN = EXAMPLES / "plain_ddp.py"
ALLSTOP = SCRIPTS / "allstop_job.py"  # rank 1 alone runs the breakpoint's line; the job ends once ``done`` exists
ONLY1 = marker_line(ALLSTOP, "rank 1 only")
DRIVER = ROOT / "tests" / "scripts" / "nvim_dap_job.lua"

needs_nvim_dap = pytest.mark.skipif(
    not (NVIM_DAP and (Path(NVIM_DAP) / "lua" / "dap.lua").exists() and NVIM),
    reason="set RTDEBUG_NVIM_DAP to an nvim-dap checkout (0.6.0 for Neovim 0.7.2) and put nvim on PATH: "
    "nvim-dap is fetched from GitHub, which CI cannot reach",
)


def nvim(tmp_path, port: int, n: int, end: str, script: Path, line: int, run: str = "", dap_python: str = ""):
    """Start the driver (tests/scripts/nvim_dap_job.lua) in headless Neovim; the process, and where it writes
    what it saw."""
    out = tmp_path / "nvim.json"
    env = dict(
        os.environ,
        RTDEBUG_NVIM_OUT=str(out),
        RTDEBUG_NVIM_GO=str(tmp_path / "go"),
        RTDEBUG_NVIM_PORT=str(port),
        RTDEBUG_NVIM_SCRIPT=str(script),
        RTDEBUG_NVIM_LINE=str(line),
        RTDEBUG_NVIM_RANKS=str(n),
        RTDEBUG_NVIM_END=end,
        RTDEBUG_NVIM_RUN=run,
        RTDEBUG_NVIM_DAP_PYTHON=dap_python,
        XDG_STATE_HOME=str(tmp_path),  # nvim-dap's log and Neovim's shada stay in the test's folder
        XDG_DATA_HOME=str(tmp_path),
    )
    argv = [NVIM, "--headless", "-u", "NONE", "-i", "NONE", "--cmd", f"set rtp+={NVIM_DAP}", "-c", f"luafile {DRIVER}"]
    with open(tmp_path / "nvim.err", "w") as err:
        proc = subprocess.Popen(argv, env=env, cwd=tmp_path, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                stderr=err, preexec_fn=default_dispositions)  # fmt: skip
    return proc, out


def seen(proc: subprocess.Popen, out: Path, status: str = "ok") -> dict:
    """What the driver wrote, once it says ``status`` (or has exited: then it must have said it)."""

    def read() -> dict:
        try:
            return json.loads(out.read_text())
        except (OSError, ValueError):  # not written yet (or being written)
            return {"status": None}

    got = until(
        read, 300, f"nvim-dap's driver: {status}", ok=lambda g: g["status"] == status or proc.poll() is not None
    )
    got = read()
    assert got["status"] == status, (got, (out.parent / "nvim.err").read_text()[-2000:])
    return got


def conversation(got: dict, n: int) -> None:
    """Every rank a child named ``rank N``; rank 1 stopped at the breakpoint, every other paused by the ranks'
    all-stop; ``dist.get_rank()`` is each one's own rank."""
    names = [f"rank {k}" for k in range(n)]
    assert sorted(got["children"]) == names
    assert got["ranks"] == {name: str(k) for k, name in enumerate(names)}
    assert got["reasons"] == {name: "breakpoint" if k == 1 else "pause" for k, name in enumerate(names)}
    assert got["lines"]["rank 1"] == ONLY1


CASES = [("disconnect", 2, ""), ("terminate", 2, ""), *([("disconnect", 4, ""), ("terminate", 4, "")] if FULL else [])]
CASES += [("disconnect", 2, NVIM_DAP_PYTHON)] if NVIM_DAP_PYTHON else []


@needs_nvim_dap
@pytest.mark.parametrize(("end", "n", "dap_python"), CASES, ids=lambda v: "dap-python" if "/" in str(v) else str(v))
def test_nvim_dap_debugs_every_rank_through_the_job_endpoint(
    job, registry_dir, tmp_path, port_base, monkeypatch, end, n, dap_python
):
    """Every rank a child; rank 1 stops at a breakpoint, every other rank is paused; each evaluates its own rank.
    disconnect: continue in rank 1 continues all, every session disconnects, the job runs to exit 0.
    terminate: :DapTerminate on rank 1 detaches it and the job runs on; :DapTerminate on the job's session ends
    every rank, nothing is left."""
    monkeypatch.delenv("RTDEBUG_ALL_STOP", raising=False)  # the suite turns all-stop off; a user has it on
    dap_port, done = port_base + 15, tmp_path / "done"
    j = job(
        "torchrun", "--debug-port-base", str(port_base), "--dap-port", str(dap_port), "--nproc-per-node", str(n),
        str(ALLSTOP), str(done),
    )  # fmt: skip
    sid = j.session_id()
    j.wait_output(f"DAP endpoint for session {sid} on 127.0.0.1:{dap_port}", 60)
    pids = [r["pid"] for r in wait_ranks(registry_dir, sid, n).values()]
    proc, out = nvim(tmp_path, dap_port, n, end, ALLSTOP, ONLY1, dap_python=dap_python)
    try:
        if end == "terminate":
            got = seen(proc, out, "detached")
            conversation(got, n)
            assert any("rtdebug: rank 1 keeps running; to end the whole job: `rtdebug stop`" in text
                       for text in got["console"]["rank 1"]), got["console"]  # fmt: skip
            assert {f"rank {k}" for k in range(n) if k != 1} <= set(got["continued"])  # its client left
            until(lambda: read_ranks(registry_dir, sid)[1]["state"], 60, "rank 1 detached", ok=lambda s: s == "ready")
            assert j.proc.poll() is None and alive(pids) == pids  # the job runs on
            tree = [p.pid for p in psutil.Process(j.proc.pid).children(recursive=True)]
            (tmp_path / "go").touch()
            seen(proc, out)
            j.wait(60)
            stop = f"rtdebug: DAP endpoint: stopped session {sid} ("
            until(lambda: stop in j.output(), 60, "the endpoint's stop", context=lambda: (j.tail(), out.read_text()))
            assert alive(pids) == []
            # the endpoint that served the stop tells its client, then ends by itself, after the launcher
            until(lambda: alive(tree), 30, "every process of the job ended", ok=lambda left: left == [])
        else:
            got = seen(proc, out)
            conversation(got, n)
            assert {f"rank {k}" for k in range(n) if k != 1} <= set(got["continued"])  # continue-all
            done.touch()
            assert j.wait(180) == 0, j.output()[-3000:]
            assert f"rtdebug: session {sid} exited (exit code 0)" in j.output()
            assert all(f"rank {k} ended after" in j.output() for k in range(n))
        assert proc.wait(60) == 0
    finally:
        kill_tree(proc)
    assert all(port_free(p) for p in [dap_port, *range(port_base, port_base + n)])


@needs_nvim_dap
def test_nvim_dap_runs_what_attach_format_prints(job, registry_dir, tmp_path, port_base):
    """One rank, no job endpoint: the line ``rtdebug attach --rank 1 --format nvim-dap`` prints, run as is."""
    j = job("torchrun", "--debug-port-base", str(port_base), "--wait", "1", "--nproc-per-node", "2",
            str(PLAIN), "--epochs", "1", "--samples", "64")  # fmt: skip
    sid = j.session_id()
    env = {"RTDEBUG_REGISTRY_DIR": str(registry_dir)}
    printed = rtdebug("attach", "--session", sid, "--rank", "1", "--format", "nvim-dap", env=env)
    assert printed.returncode == 0, printed.stderr
    proc, out = nvim(tmp_path, 0, 1, "disconnect", PLAIN, marker_line(PLAIN, "plain step"), run=printed.stdout)
    try:
        got = seen(proc, out)
    finally:
        kill_tree(proc)
    assert got["children"] == [f"rtdebug rank 1 ({sid})"] and got["ranks"] == {f"rtdebug rank 1 ({sid})": "1"}
    assert got["lines"] == {f"rtdebug rank 1 ({sid})": marker_line(PLAIN, "plain step")}
    assert j.wait(180) == 0, j.output()[-3000:]
