"""What a user of the renamed package sees end to end: a failing script reads as under plain torchrun, a
user's own package named like ours is never what a rank runs, and a stopped ``rtdebug run`` ends quietly."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from support.jobs import read_ranks, rtdebug
from support.paths import SCRIPTS

pytestmark = pytest.mark.e2e
TRAIN = textwrap.dedent("""
    import torch, torch.distributed as dist
    dist.init_process_group("gloo")
    t = torch.ones(1)
    dist.all_reduce(t)
    print(f"rank {dist.get_rank()} ok {int(t.item())}", flush=True)
    dist.destroy_process_group()
""")
MARKER = 'open({path!r}, "a").write(__name__ + "\\n")\n'


def test_failing_script_reads_as_under_plain_torchrun(job, port_base, registry_dir):
    script = "tests/scripts/crash_rank1.py"
    j = job("torchrun", "--debug-port-base", str(port_base), "--nproc-per-node", "2", script)
    assert j.wait() != 0
    out = j.output()
    tb = out[out.index("Traceback (most recent call last):") :]
    frames = re.findall(r'^\s*File "([^"]+)", line \d+', tb, flags=re.M)
    assert frames[0] == str(SCRIPTS / "crash_rank1.py"), tb[:1500]  # starts at the user's script
    first_error = tb.index("ZeroDivisionError: bad batch")
    assert not [f for f in re.findall(r'File "([^"]+)"', tb[:first_error]) if "/rtdebug/" in f or "runpy" in f]
    assert f"{script} FAILED" in out  # torchrun's failure summary names the script
    assert "rtdebug.rank.bootstrap FAILED" not in out


def _user_packages(d: Path, marker: Path) -> None:
    """A workspace with packages of its own named harness (the old name) and rtdebug (the new one)."""
    for name in ("harness/__init__.py", "harness/__main__.py", "harness/bootstrap.py", "rtdebug/__init__.py",
                 "rtdebug/__main__.py", "rtdebug/rank/__init__.py", "rtdebug/rank/bootstrap.py"):  # fmt: skip
        p = d / name
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(MARKER.format(path=str(marker)))
    (d / "train.py").write_text(TRAIN)


@pytest.mark.parametrize("how", ["python -m rtdebug", "rtdebug console script"])
def test_a_user_package_named_like_ours_never_runs(tmp_path, port_base, registry_dir, how):
    """The ranks (and the launcher) run the installed rtdebug from a workspace holding harness/ and rtdebug/
    packages of its own. ``python -m rtdebug`` from a folder that has rtdebug/ is Python's own rule (the cwd
    comes first), so that case starts from a workspace with harness/ only."""
    work, marker = tmp_path / "work", tmp_path / "marker.txt"
    _user_packages(work, marker)
    if how == "python -m rtdebug":
        import shutil

        shutil.rmtree(work / "rtdebug")
        cmd = [sys.executable, "-m", "rtdebug"]
    else:
        cmd = [str(Path(sys.executable).with_name("rtdebug"))]
    env = dict(os.environ, RTDEBUG_REGISTRY_DIR=str(registry_dir))
    env.pop("PYTHONSAFEPATH", None)
    r = subprocess.run(
        [*cmd, "torchrun", "--debug-port-base", str(port_base), "--nproc-per-node", "2", "train.py"],
        cwd=work,
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    assert "rank 0 ok 2" in r.stdout + r.stderr and "rank 1 ok 2" in r.stdout + r.stderr
    assert not marker.exists(), marker.read_text()
    sid = re.search(r"rtdebug: session (\S+) starting", r.stdout).group(1)
    assert {e["state"] for e in read_ranks(registry_dir, sid).values()} == {"exited"}


def test_stop_ends_rtdebug_run_quietly_with_its_signal(job, tmp_path, port_base, registry_dir):
    """`rtdebug stop` of `rtdebug run`: the process records `stopped` and ends by SIGTERM, as plain
    `python script.py` would (no SystemExit unwinding through the script's threads, no abort)."""
    script = tmp_path / "forever.py"
    script.write_text("import threading, time\nprint('up', flush=True)\nthreading.Event().wait(600)\n")
    j = job("run", "--port", str(port_base), str(script))
    sid = j.session_id()
    j.wait_output("up")
    r = rtdebug("stop", "--session", sid, env={"RTDEBUG_REGISTRY_DIR": str(registry_dir)})
    assert r.returncode == 0, r.stderr
    assert j.wait(60) == -signal.SIGTERM
    out = j.output()
    assert "Traceback" not in out and "Aborted" not in out, out
    assert f"rtdebug: session {sid} stopped (signal {int(signal.SIGTERM)})" in out
    session = json.loads((registry_dir / sid / "session.json").read_text())
    assert session["state"] == "stopped" and session["exit_code"] == 128 + signal.SIGTERM
    assert read_ranks(registry_dir, sid)[0]["state"] == "exited"
