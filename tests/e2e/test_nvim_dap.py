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

import pytest

from support.jobs import read_ranks, rtdebug
from support.paths import EXAMPLES, ROOT, marker_line
from support.ports import port_free
from support.procs import alive
from support.sigs import default_dispositions
from support.wait import until

pytestmark = pytest.mark.e2e
NVIM_DAP = os.environ.get("RTDEBUG_NVIM_DAP", "")
NVIM_DAP_PYTHON = os.environ.get("RTDEBUG_NVIM_DAP_PYTHON", "")  # optional: nvim-dap-python's checkout
NVIM = shutil.which("nvim")
FULL = os.environ.get("RTDEBUG_FULL") == "1"
SCRIPT = EXAMPLES / "plain_ddp.py"
DRIVER = ROOT / "tests" / "scripts" / "nvim_dap_job.lua"

needs_nvim_dap = pytest.mark.skipif(
    not (NVIM_DAP and (Path(NVIM_DAP) / "lua" / "dap.lua").exists() and NVIM),
    reason="set RTDEBUG_NVIM_DAP to an nvim-dap checkout (0.6.0 for Neovim 0.7.2) and put nvim on PATH: "
    "nvim-dap is fetched from GitHub, which CI cannot reach",
)


def nvim(tmp_path, port: int, n: int, end: str, run: str = "", dap_python: str = "") -> dict:
    """Run the driver (tests/scripts/nvim_dap_job.lua) in headless Neovim; what it saw."""
    out = tmp_path / "nvim.json"
    env = dict(
        os.environ,
        RTDEBUG_NVIM_OUT=str(out),
        RTDEBUG_NVIM_PORT=str(port),
        RTDEBUG_NVIM_SCRIPT=str(SCRIPT),
        RTDEBUG_NVIM_LINE=str(marker_line(SCRIPT, "plain step")),
        RTDEBUG_NVIM_RANKS=str(n),
        RTDEBUG_NVIM_END=end,
        RTDEBUG_NVIM_RUN=run,
        RTDEBUG_NVIM_DAP_PYTHON=dap_python,
        XDG_STATE_HOME=str(tmp_path),  # nvim-dap's log and Neovim's shada stay in the test's folder
        XDG_DATA_HOME=str(tmp_path),
    )
    argv = [NVIM, "--headless", "-u", "NONE", "-i", "NONE", "--cmd", f"set rtp+={NVIM_DAP}", "-c", f"luafile {DRIVER}"]
    r = subprocess.run(argv, env=env, cwd=tmp_path, stdin=subprocess.DEVNULL, capture_output=True, text=True,
                       timeout=300, preexec_fn=default_dispositions)  # fmt: skip
    assert out.exists(), (r.returncode, r.stdout[-2000:], r.stderr[-2000:])
    got = json.loads(out.read_text())
    assert got["status"] == "ok", (got["log"], got, r.stderr[-2000:])
    assert set(got["lines"].values()) == {marker_line(SCRIPT, "plain step")}
    return got


CASES = [("disconnect", 2, ""), ("terminate", 2, ""), *([("disconnect", 4, "")] if FULL else [])]
CASES += [("disconnect", 2, NVIM_DAP_PYTHON)] if NVIM_DAP_PYTHON else []


@needs_nvim_dap
@pytest.mark.parametrize(("end", "n", "dap_python"), CASES, ids=lambda v: "dap-python" if "/" in str(v) else str(v))
def test_nvim_dap_gets_every_rank_through_the_job_endpoint(job, registry_dir, tmp_path, port_base, end, n, dap_python):
    """Every rank a child, stopped at the breakpoint, its own rank; then disconnect (the job runs to exit 0) or
    :DapTerminate on the parent (every rank ends, nothing is left)."""
    dap_port = port_base + 15
    j = job(
        "torchrun", "--debug-port-base", str(port_base), "--wait", "all", "--dap-port", str(dap_port),
        "--nproc-per-node", str(n), str(SCRIPT), "--epochs", "1", "--samples", str(32 * n),
    )  # fmt: skip
    sid = j.session_id()
    j.wait_output(f"DAP endpoint for session {sid} on 127.0.0.1:{dap_port}", 60)
    got = nvim(tmp_path, dap_port, n, end, dap_python=dap_python)
    names = [f"rank {k}" for k in range(n)]
    assert sorted(got["children"]) == names
    assert got["ranks"] == {name: str(k) for k, name in enumerate(names)}
    if end == "terminate":
        j.wait(60)
        until(lambda: f"rtdebug: DAP endpoint: stopped session {sid} (" in j.output(), 60, "the endpoint's stop")
        assert alive([r["pid"] for r in read_ranks(registry_dir, sid).values()]) == []
    else:
        assert j.wait(180) == 0, j.output()[-3000:]
        assert f"rtdebug: session {sid} exited (exit code 0)" in j.output()
    assert all(port_free(p) for p in [dap_port, *range(port_base, port_base + n)])


@needs_nvim_dap
def test_nvim_dap_runs_what_attach_format_prints(job, registry_dir, tmp_path, port_base):
    """One rank, no job endpoint: the line ``rtdebug attach --rank 1 --format nvim-dap`` prints, run as is."""
    j = job("torchrun", "--debug-port-base", str(port_base), "--wait", "1", "--nproc-per-node", "2",
            str(SCRIPT), "--epochs", "1", "--samples", "64")  # fmt: skip
    sid = j.session_id()
    env = {"RTDEBUG_REGISTRY_DIR": str(registry_dir)}
    printed = rtdebug("attach", "--session", sid, "--rank", "1", "--format", "nvim-dap", env=env)
    assert printed.returncode == 0, printed.stderr
    got = nvim(tmp_path, 0, 1, "disconnect", run=printed.stdout)
    assert got["children"] == [f"rtdebug rank 1 ({sid})"] and got["ranks"] == {f"rtdebug rank 1 ({sid})": "1"}
    assert j.wait(180) == 0, j.output()[-3000:]
