"""The job's one DAP endpoint (``rtdebug dap``): a real DAP client attaches once, gets every rank of a real
torchrun job as a ``startDebugging`` child, debugs them through the ranks' own endpoints, and either leaves
the job running (disconnect) or ends all of it (terminate)."""

from __future__ import annotations

import os
import re
import shutil
import socket
import subprocess

import psutil
import pytest

from rtdebug.inject import runner as inject

from support.dap import DAPClient, DAPError
from support.jobs import Job, read_ranks, rtdebug, wait_ranks
from support.paths import EXAMPLES, PY, SCRIPTS, marker_line
from support.ports import port_free
from support.procs import alive, kill_tree
from support.users import NOBODY, SETPRIV
from support.wait import until

pytestmark = pytest.mark.e2e
SCRIPT = EXAMPLES / "plain_ddp.py"
FULL = os.environ.get("RTDEBUG_FULL") == "1"
FOREIGN_PY = "/usr/bin/python3" if os.path.exists("/usr/bin/python3") else "python3"
CAN_SETPRIV = os.geteuid() == 0 and shutil.which("setpriv") is not None
PROBE = """
import socket, sys
s = socket.create_connection(("127.0.0.1", int(sys.argv[1])))
b = b'{"seq":1,"type":"request","command":"initialize","arguments":{}}'
s.sendall(b"Content-Length: %d\\r\\n\\r\\n" % len(b) + b)
try:
    print("closed" if s.recv(100) == b"" else "answered")
except OSError:
    print("closed")
"""


def endpoint_port(server: Job) -> int:
    out = server.wait_output(" on 127.0.0.1:", 60)
    return int(re.search(r"DAP endpoint for session \S+ on 127\.0\.0\.1:(\d+)", out).group(1))


def take_children(
    parent: DAPClient, n: int, breakpoints: dict[str, list[int]] | None = None, back: int | None = None
) -> dict[int, DAPClient]:
    """Answer ``n`` startDebugging requests as a client does: attach a child session to each rank's address,
    or (``back``: the job endpoint's port) as dape does, to the parent's address, which relays it."""
    kids: dict[int, DAPClient] = {}
    for _ in range(n):
        req = parent.reverse_request("startDebugging", 120)
        args = req["arguments"]
        config = args["configuration"]
        assert args["request"] == "attach" and config["request"] == "attach"
        rank = int(re.fullmatch(r"rank (\d+)", config["name"]).group(1))
        where = ("127.0.0.1", back) if back and rank == 1 else (config["connect"]["host"], config["connect"]["port"])
        child = DAPClient(*where)
        child.attach(breakpoints or {}, **{k: v for k, v in config.items() if k != "request"})  # as a client does
        parent.answer(req)
        kids[rank] = child
    return kids


def start_job(job, port_base: int, n: int, epochs: int, *extra: str) -> Job:
    return job(
        "torchrun", "--debug-port-base", str(port_base), *extra, "--nproc-per-node", str(n),
        str(SCRIPT), "--epochs", str(epochs), "--samples", str(32 * n),
    )  # fmt: skip


def stop_and_evaluate(kids: dict[int, DAPClient], line: int) -> None:
    """Each child stops at the breakpoint in its own rank, evaluates its rank there, clears it and continues."""
    threads = {}
    for rank, c in sorted(kids.items()):
        stopped = c.wait_stopped(120)
        assert stopped["reason"] == "breakpoint"
        frame = c.top_frame(stopped["threadId"])
        assert frame["line"] == line
        assert c.evaluate("dist.get_rank()", frame["id"]) == str(rank)
        threads[rank] = stopped["threadId"]
    for rank, c in kids.items():
        c.request("setBreakpoints", source={"path": str(SCRIPT)}, breakpoints=[])
        c.continue_(threads[rank])


@pytest.mark.parametrize("n", [2, *([4] if FULL else [])])
def test_one_endpoint_every_rank_then_disconnect_leaves_the_job(job, registry_dir, port_base, n):
    """``rtdebug torchrun --dap-port``: attach once, n children, one per rank (rank 1's connecting back to the
    endpoint, which relays it, as dape's do); each stops at its breakpoint and is its own rank; disconnect all:
    the job runs to its end (exit 0) and the endpoint closes with it."""
    line = marker_line(SCRIPT, "plain step")
    j = start_job(job, port_base, n, 1, "--wait", "all", "--dap-port", str(port_base + 15))
    sid = j.session_id()
    assert endpoint_port(j) == port_base + 15
    parent = DAPClient("127.0.0.1", port_base + 15)
    attach = parent.attach_job()
    parent.event("initialized")
    parent.request("configurationDone")
    parent.response(attach)
    kids = take_children(parent, n, {str(SCRIPT): [line]}, back=port_base + 15)  # rank 1 back through the endpoint
    assert sorted(kids) == list(range(n))
    caps = kids[1].event("capabilities", 10)["capabilities"]  # the rank's own, as the relay hands them on
    assert any(f["filter"] == "uncaught" for f in caps["exceptionBreakpointFilters"])
    assert parent.request("threads")["threads"] == []
    stop_and_evaluate(kids, line)
    for c in kids.values():
        c.disconnect()
    parent.disconnect()
    assert j.wait(180) == 0, j.output()[-3000:]
    assert f"rtdebug: session {sid} exited (exit code 0)" in j.output()
    assert f"rtdebug: DAP endpoint for session {sid} closed" in j.output()
    assert port_free(port_base + 15)


def said(client: DAPClient) -> str:
    """What a client's console was told so far (its output events, left in place)."""
    return "".join(m["body"]["output"] for m in client.pending("event") if m["event"] == "output")


def test_all_stop_continue_all_and_a_terminate_to_one_rank_through_the_endpoint(
    job, registry_dir, port_base, tmp_path, monkeypatch
):
    """All-stop as a user has it (on): through the endpoint's children, a breakpoint stops rank 1 and rank 0 is
    paused by the ranks, each evaluates its own rank, and the parent's console says both states; continue in
    rank 1 continues rank 0; a ``terminate`` sent to rank 1's child detaches it, and the job runs on to exit 0."""
    monkeypatch.delenv("RTDEBUG_ALL_STOP", raising=False)  # the suite turns all-stop off; a user has it on
    script, done = SCRIPTS / "allstop_job.py", tmp_path / "done"
    only1 = marker_line(script, "rank 1 only")
    j = job("torchrun", "--debug-port-base", str(port_base), "--dap-port", str(port_base + 15), "--nproc-per-node",
            "2", str(script), str(done))  # fmt: skip
    sid = j.session_id()
    endpoint_port(j)
    wait_ranks(registry_dir, sid, 2)
    parent = DAPClient("127.0.0.1", port_base + 15)
    parent.response(parent.attach_job())
    kids = take_children(parent, 2, {str(script): [only1]}, back=port_base + 15)
    s1 = kids[1].wait_stopped(120)
    s0 = kids[0].wait_stopped(60)  # no request of ours: the ranks' all-stop
    assert (s1["reason"], s0["reason"]) == ("breakpoint", "pause")
    assert kids[1].top_frame(s1["threadId"])["line"] == only1
    for rank, stop in ((0, s0), (1, s1)):
        assert kids[rank].evaluate("dist.get_rank()", kids[rank].top_frame(stop["threadId"])["id"]) == str(rank)
    until(lambda: said(parent), 60, "the states in the job's console", ok=lambda text: (
        f"rtdebug: rank 1: stopped at allstop_job.py:{only1} (breakpoint)" in text
        and "rtdebug: rank 0: paused (all-stop, by rank 1)" in text))  # fmt: skip
    kids[1].request("setBreakpoints", source={"path": str(script)}, breakpoints=[])
    kids[1].continue_(s1["threadId"])
    kids[0].event("continued", 60)  # continue in one rank continues all
    seq = kids[1].send("terminate")
    until(lambda: said(kids[1]), 60, "rank 1's console", ok=lambda text: (
        "rtdebug: rank 1 keeps running; to end the whole job: `rtdebug stop`" in text))  # fmt: skip
    kids[1].response(seq)
    kids[1].event("terminated", 60)
    kids[1].close()  # as nvim-dap does once terminate is answered: the relay lets go of the rank too
    until(lambda: read_ranks(registry_dir, sid)[1]["state"], 60, "rank 1 detached", ok=lambda st: st == "ready")
    assert j.proc.poll() is None  # the job runs on
    done.touch()
    assert j.wait(120) == 0, j.output()[-3000:]
    assert "rank 0 ended after" in j.output() and "rank 1 ended after" in j.output()
    kids[0].close()
    parent.close()


def test_terminate_on_the_job_endpoint_ends_every_rank(job, registry_dir, port_base):
    """``terminate`` to the job endpoint stops the session as ``rtdebug stop`` does: every rank together, the
    children see their ranks end, nothing is left (no rank, no agent, no port, not the endpoint)."""
    j = start_job(job, port_base, 2, 100000)
    sid = j.session_id()
    ranks = wait_ranks(registry_dir, sid, 2)
    pids = [r["pid"] for r in ranks.values()]
    server = job("dap", "--session", sid, "--ranks", "all")
    parent = DAPClient("127.0.0.1", endpoint_port(server))
    parent.response(parent.attach_job())
    kids = take_children(parent, 2)
    tree = [p.pid for p in psutil.Process(j.proc.pid).children(recursive=True)]
    parent.request("terminate", timeout=10)  # answered at once; the stop follows, then "terminated"
    assert parent.event("terminated", 60) == {}
    j.wait(60)
    assert f"rtdebug: DAP endpoint: stopped session {sid} (" in server.output()  # said before "terminated"
    said = [m["body"]["output"] for m in parent.pending("event") if m["event"] == "output"]
    assert any(f"rtdebug: stopped session {sid} (" in text for text in said), said
    assert alive(pids) == [] and alive(tree) == []
    assert port_free(port_base) and port_free(port_base + 1)
    assert server.wait(30) == 0, server.output()
    for c in kids.values():
        c.close()


def test_a_client_without_start_debugging_is_told_what_to_use(job, registry_dir, port_base):
    """No ``supportsStartDebuggingRequest``: ``attach`` fails naming ``rtdebug attach --rank N``; garbage first
    bytes and another uid (as root) are refused; with ``--ranks 1`` Helix (which does not announce it) gets rank
    1 alone, its child relayed; the job is untouched."""
    j = start_job(job, port_base, 2, 100000)
    sid = j.session_id()
    wait_ranks(registry_dir, sid, 2)
    server = job("dap", "--session", sid, "--ranks", "1")
    port = endpoint_port(server)
    plain = DAPClient("127.0.0.1", port)
    with pytest.raises(DAPError, match=re.escape(f"`rtdebug attach --session {sid} --rank N` prints its host:port")):
        plain.response(plain.attach_job(start_debugging=False))
    plain.disconnect()
    with socket.create_connection(("127.0.0.1", port)) as s:
        s.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
        assert s.recv(100) == b""  # closed without a reply
    server.wait_output("closed a client: a message without Content-Length")
    if CAN_SETPRIV:  # owner-only, as the ranks' endpoints: another uid's socket is closed unread
        r = subprocess.run([*SETPRIV, FOREIGN_PY, "-c", PROBE, str(port)], capture_output=True, text=True, timeout=60)
        assert r.stdout.strip() == "closed", (r.stdout, r.stderr)
        server.wait_output(f"(uid {NOBODY}): its socket belongs to another user")
    parent = DAPClient("127.0.0.1", port)  # Helix ("hx") handles startDebugging without saying so
    parent.response(parent.attach_job(start_debugging=False, client_id="hx"))
    kids = take_children(parent, 1, back=port)  # and its children connect to the parent's address
    assert list(kids) == [1]
    assert parent.pending("request") == []  # rank 0 is not offered
    for c in kids.values():
        c.disconnect()
    parent.disconnect()
    assert j.proc.poll() is None  # the job runs on


def test_dap_port_mistakes_are_one_line_and_leave_nothing(registry_dir, port_base):
    """``--dap-port`` on a rank's port, on a busy port, or out of range: one line, no session, nothing bound."""
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        taken = busy.getsockname()[1]
        cases = [
            (port_base + 1, 2, f"rtdebug: error: --dap-port {port_base + 1} is one of the ranks' debug ports"),
            (taken, 1, f"rtdebug: error: --dap-port {taken} is already in use by "),
            (70000, 2, "rtdebug: error: --dap-port 70000: a TCP port, 1-65535\n"),
        ]
        for port, code, want in cases:
            argv = ["--debug-port-base", str(port_base), "--dap-port", str(port), "--nproc-per-node", "2", str(SCRIPT)]
            r = rtdebug("torchrun", *argv, env={"RTDEBUG_REGISTRY_DIR": str(registry_dir)})
            assert (r.returncode, r.stderr.count("\n")) == (code, 1) and r.stderr.startswith(want), r.stderr
    assert list(registry_dir.glob("*/session.json")) == []
    assert port_free(port_base) and port_free(port_base + 1)


def test_an_adopted_job_is_detached_by_terminate_and_runs_on(job, registry_dir, port_base, tmp_path):
    """``rtdebug dap`` on an adopted (torch-free) job: both ranks as children; ``terminate`` does what ``rtdebug
    stop`` does to an adopted job, a detach, and says so; the job runs on and ends well."""
    if (why := inject.ptrace_denied(os.getpid())) is not None:
        pytest.skip(why)
    control, log = tmp_path / "control", tmp_path / "plain.log"
    with open(log, "wb") as f:
        proc = subprocess.Popen([PY, str(SCRIPTS / "adopt_plain.py"), str(control)], stdout=f, stderr=subprocess.STDOUT)
    try:
        until(lambda: log.read_text().count("running") >= 2, 60, "both ranks running", context=log.read_text)
        rank0 = re.search(r"plain rank 0 pid (\d+)", log.read_text()).group(1)
        env = {"RTDEBUG_REGISTRY_DIR": str(registry_dir)}
        assert rtdebug("adopt", rank0, "--debug-port-base", str(port_base), env=env).returncode == 0
        sid = next(p.name for p in registry_dir.iterdir() if (p / "session.json").exists())
        server = job("dap", "--session", sid)
        parent = DAPClient("127.0.0.1", endpoint_port(server))
        parent.response(parent.attach_job())
        kids = take_children(parent, 2)
        parent.request("terminate", timeout=10)
        assert parent.event("terminated", 60) == {}
        said = "".join(m["body"]["output"] for m in parent.pending("event") if m["event"] == "output")
        assert "terminate detaches rtdebug from every rank (an adopted job runs on)" in said
        assert f"rtdebug: session {sid} detached from 2 ranks; the job runs on" in said
        for c in kids.values():
            c.close()
        assert proc.poll() is None
        control.touch()
        assert proc.wait(60) == 0 and log.read_text().count("steps: ok") == 2
        assert server.wait(30) == 0
    finally:
        kill_tree(proc)


@pytest.mark.skipif(not FULL, reason="a 4-rank mesh job: RTDEBUG_FULL=1")
def test_a_mesh_selector_chooses_children_named_by_coordinates(job, registry_dir, port_base):
    """``--ranks dp=1,tp=*`` on a 2x2 (dp, tp) mesh: ranks 2 and 3 alone, each named with its coordinates, once
    its mesh is published (a rank is attachable before the job makes its mesh)."""
    j = job("torchrun", "--debug-port-base", str(port_base), "--nproc-per-node", "4",
            str(SCRIPTS / "mesh_job.py"), "--layout", "2d")  # fmt: skip
    sid = j.session_id()
    wait_ranks(registry_dir, sid, 4)
    server = job("dap", "--session", sid, "--ranks", "dp=1,tp=*")
    parent = DAPClient("127.0.0.1", endpoint_port(server))
    parent.response(parent.attach_job())
    names = sorted(parent.reverse_request("startDebugging", 120)["arguments"]["configuration"]["name"] for _ in "ab")
    assert names == ["rank 2 (dp=1,tp=0)", "rank 3 (dp=1,tp=1)"]
    assert parent.pending("request") == []
    parent.disconnect()


def test_ranks_that_restart_become_new_children(job, registry_dir, port_base, tmp_path):
    """torchrun restarts every rank (``--max-restarts 1``, rank 1 failing once): the attached client is handed a
    new child for each new rank process, without attaching again."""
    go, control = tmp_path / "go", tmp_path / "control"
    j = job("torchrun", "--debug-port-base", str(port_base), "--dap-port", str(port_base + 15), "--max-restarts", "1",
            "--nproc-per-node", "2", str(SCRIPTS / "restart_once.py"), str(go), str(control))  # fmt: skip
    j.session_id()
    endpoint_port(j)
    parent = DAPClient("127.0.0.1", port_base + 15)
    parent.response(parent.attach_job())
    first = [parent.reverse_request("startDebugging", 120)["arguments"]["configuration"] for _ in "ab"]
    j.wait_output("rank 1 attempt 0 pid")
    go.touch()
    j.wait_output("rank 1 attempt 1 pid")
    second = [parent.reverse_request("startDebugging", 120)["arguments"]["configuration"] for _ in "ab"]
    assert sorted(c["name"] for c in first) == sorted(c["name"] for c in second) == ["rank 0", "rank 1"]
    pids = {c["rtdebugRank"]["pid"] for c in first}, {c["rtdebugRank"]["pid"] for c in second}
    assert not pids[0] & pids[1]  # new processes
    control.touch()
    assert j.wait(120) == 0, j.output()[-3000:]
    parent.close()
