"""The torch-free core on every supported Python, with a real DAP client.

debugpy traces with ``sys.settrace`` on 3.10/3.11 and with ``sys.monitoring`` on 3.12+, so each
interpreter is a different debugger path. Each ``.venv-3.X`` (``scripts/pythons.sh``) holds the harness
installed as a torch-free user installs it (``pip install -e .``: debugpy and psutil; no torch,
no Ray), and the job runs that venv's ``rtdebug`` entry point from outside the repository.

Scenarios (``SCENARIOS``, each on every Python): lazy endpoint + attach / detach / re-attach +
``rtdebug.breakpoint()`` + ``--post-mortem``; ``--wait``; owner-only access (another uid gets nothing);
``rtdebug stacks`` of a running and of a stopped rank. A function ``(rt: Runner) -> None`` added there runs
on every Python (``tests/support/venvjobs.py`` holds the runner). A missing ``.venv-3.X`` skips, or fails when
``RTDEBUG_PYTHONS_REQUIRED=1`` (scripts/test.sh).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from collections.abc import Callable

import pytest

from support.dap import DAPClient
from support.jobs import read_ranks
from support.paths import ROOT, SCRIPTS, marker_line
from support.ports import port_free
from support.procs import alive
from support.users import NOBODY
from support.venvjobs import (
    SCRIPT,
    Runner,
    VenvJob,
    debugpy_loaded,
    require_venv,
    resume_without_breakpoints,
    stop_in,
    venv_bin,
)
from support.wait import stays

pytestmark = [pytest.mark.e2e, pytest.mark.pythons]

PYTHONS = ("3.10", "3.11", "3.12", "3.13")


def scenario_lazy_attach_detach_postmortem(rt: Runner) -> None:
    """Lazy endpoint (no debugpy until a client connects), attach, detach, re-attach, rtdebug.breakpoint(),
    then --post-mortem stops the attached client at the raise site."""
    work = marker_line(SCRIPT, "work")
    raise_line = next(i for i, t in enumerate(SCRIPT.read_text().splitlines(), 1) if "RAISE SITE" in t)
    j = rt.start(
        "run", "--port", str(rt.port), "--post-mortem", "--post-mortem-wait", "60", str(SCRIPT), str(rt.ctl), "--raise"
    )
    rank = rt.rank0(j, lazy=True)
    j.wait_output("script started")
    assert not debugpy_loaded(rank["pid"]), "a lazy rank loaded debugpy before any client connected"
    c = DAPClient("127.0.0.1", rt.port)
    c.attach({str(SCRIPT): [work]})
    frame = stop_in(c, work, "work")
    rt.check_interpreter(c, frame["id"])
    assert debugpy_loaded(rank["pid"])
    first = int(c.evaluate("i", frame["id"]))
    resume_without_breakpoints(c, frame)
    c.disconnect()
    rt.rank0(j, attach_count=1)  # back to ready (detached)
    c = DAPClient("127.0.0.1", rt.port)  # re-attach: breakpoints bind again
    c.attach({str(SCRIPT): [work]})
    frame = stop_in(c, work, "work")
    again = int(c.evaluate("i", frame["id"]))
    assert again > first, (first, again)  # the loop ran on while nobody was attached
    resume_without_breakpoints(c, frame)
    (rt.ctl / "go").touch()
    frame = stop_in(c, name="<module>")  # rtdebug.breakpoint()
    assert int(c.evaluate("i", frame["id"])) > again
    c.continue_(frame["threadId"])
    j.wait_output("breakpoint returned True")
    frame = stop_in(c, raise_line, "<module>")  # post-mortem at the raise site
    assert frame["reason"] == "exception"
    c.continue_(frame["threadId"])
    c.disconnect()
    assert j.wait(120) == 1, j.output()[-3000:]
    final = read_ranks(rt.registry, j.session_id())[0]
    assert final["state"] == "failed" and "ValueError: boom after" in final["error"], final
    assert alive([rank["pid"]]) == [] and port_free(rt.port)


def scenario_wait(rt: Runner) -> None:
    """--wait: the script does not start before a client attaches (first stop is the first iteration)."""
    work = marker_line(SCRIPT, "work")
    j = rt.start("run", "--port", str(rt.port), "--wait", str(SCRIPT), str(rt.ctl))
    rank = rt.rank0(j, wait=True)
    # a window in which the script would start: what is waited for is that nothing happens
    stays(lambda: "script started" not in j.output(), 1.0, "--wait: the script does not start before a client")
    c = DAPClient("127.0.0.1", rt.port)
    c.attach({str(SCRIPT): [work]})
    frame = stop_in(c, work, "work")
    assert c.evaluate("i", frame["id"]) == "0"
    rt.check_interpreter(c, frame["id"])
    (rt.ctl / "go").touch()
    resume_without_breakpoints(c, frame)
    frame = stop_in(c, name="<module>")  # rtdebug.breakpoint() with the client attached
    c.continue_(frame["threadId"])
    assert j.wait(120) == 0, j.output()[-3000:]
    c.close()
    out = j.output()
    assert "breakpoint returned True" in out and "script done" in out
    assert read_ranks(rt.registry, j.session_id())[0]["state"] == "exited"
    assert alive([rank["pid"]]) == [] and port_free(rt.port)


INTRUDER = """if 1:
    import json, os, socket, sys
    body = json.dumps({"seq": 1, "type": "request", "command": "initialize", "arguments": {}}).encode()
    try:  # the rank resets a refused connection, which can reach us while we still connect or send
        s = socket.create_connection(("127.0.0.1", int(sys.argv[1])), timeout=5)
        s.sendall(b"Content-Length: %d\\r\\n\\r\\n" % len(body) + body)
        s.settimeout(4)
        reply = s.recv(65536)
    except OSError:
        reply = b""
    print(json.dumps({"uid": os.getuid(), "reply": reply.decode("latin-1")}))
"""


def scenario_owner_only(rt: Runner) -> None:
    """Another uid connecting to the lazy endpoint gets no reply and starts no debugger; the owner attaches."""
    if os.geteuid() != 0 or not shutil.which("setpriv") or not os.path.exists("/usr/bin/python3"):
        pytest.skip("needs root, setpriv and /usr/bin/python3 to act as another uid")
    work = marker_line(SCRIPT, "work")
    j = rt.start("run", "--port", str(rt.port), str(SCRIPT), str(rt.ctl))
    rank = rt.rank0(j)
    j.wait_output("script started")
    r = subprocess.run(
        [
            "setpriv",
            f"--reuid={NOBODY}",
            f"--regid={NOBODY}",
            "--clear-groups",
            "/usr/bin/python3",
            "-c",
            INTRUDER,
            str(rt.port),
        ],
        cwd="/",
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout) == {"uid": NOBODY, "reply": ""}
    rt.rank0(j, refused_count=1)
    assert "rtdebug: rank 0: refused debug connection from 127.0.0.1:" in j.output()
    assert not debugpy_loaded(rank["pid"]), "a refused connection started debugpy"
    c = DAPClient("127.0.0.1", rt.port)
    c.attach({str(SCRIPT): [work]})
    frame = stop_in(c, work, "work")
    rt.check_interpreter(c, frame["id"])
    finish_attached(rt, j, c, frame)


def scenario_stacks(rt: Runner) -> None:
    """`rtdebug stacks` (faulthandler by signal) of a running rank and of a rank stopped at a breakpoint."""
    work = marker_line(SCRIPT, "work")
    j = rt.start("run", "--port", str(rt.port), str(SCRIPT), str(rt.ctl))
    sid = j.session_id()
    rt.rank0(j)
    j.wait_output("script started")
    snap = rt.stacks(sid)
    assert [g["ranks"] for g in snap["groups"]] == [[0]] and snap["unresponsive"] == [], snap
    assert any(f["file"] == str(SCRIPT) for f in snap["groups"][0]["frames"]), snap
    c = DAPClient("127.0.0.1", rt.port)
    c.attach({str(SCRIPT): [work]})
    frame = stop_in(c, work, "work")
    snap = rt.stacks(sid)  # the main thread is held by debugpy: the dump still answers
    top = snap["groups"][0]["frames"][0]
    assert (top["file"], top["function"], top["line"]) == (str(SCRIPT), "work", work), snap
    finish_attached(rt, j, c, frame)


def finish_attached(rt: Runner, j: VenvJob, c: DAPClient, frame: dict) -> None:
    """From a stop in work(): run on to rtdebug.breakpoint(), continue, and the script exits 0."""
    (rt.ctl / "go").touch()
    resume_without_breakpoints(c, frame)
    frame = stop_in(c, name="<module>")
    c.continue_(frame["threadId"])
    assert j.wait(120) == 0, j.output()[-3000:]
    c.close()
    assert "breakpoint returned True" in j.output() and port_free(rt.port)


# Scenarios run on every Python: a function (rt: Runner) -> None added here runs on each.
SCENARIOS: dict[str, Callable[[Runner], None]] = {
    "lazy": scenario_lazy_attach_detach_postmortem,
    "wait": scenario_wait,
    "owner": scenario_owner_only,
    "stacks": scenario_stacks,
}


@pytest.mark.parametrize("scenario", list(SCENARIOS))
@pytest.mark.parametrize("version", PYTHONS)
def test_torch_free_core(version, scenario, tmp_path, registry_dir, port_base):
    require_venv(version)
    rt = Runner(version, tmp_path, registry_dir, port_base)
    try:
        SCENARIOS[scenario](rt)
    finally:
        rt.close()


@pytest.mark.parametrize("version", PYTHONS)
def test_every_rtdebug_module_imports(version, tmp_path):
    """Each rtdebug module (subpackages included) imports on each Python (no 3.11+-only syntax or stdlib),
    torch and Ray aside."""
    require_venv(version)
    r = subprocess.run(
        [str(venv_bin(version) / "python"), str(SCRIPTS / "import_all.py")],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert out["file"] == str(ROOT / "harness" / "rtdebug" / "__init__.py")  # the repository's rtdebug, via the install
    assert out["failed"] == {}
