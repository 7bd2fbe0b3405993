"""``rtdebug adopt``: a plain torchrun job, started without rtdebug, gets every rank's endpoint by pid.

The jobs are ``python -m torch.distributed.run --nproc-per-node 2 tests/scripts/adopt_job.py CONTROL``
(gloo, all_reduce steps until CONTROL appears). Injection is by ptrace (``rtdebug.inject.runner``); the
tests skip where this machine cannot ptrace.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import psutil
import pytest

from rtdebug.common.errors import HarnessError
from rtdebug.inject import gdb as inject_gdb
from rtdebug.inject import jobs
from rtdebug.inject import runner as inject

from support.adoptjobs import JOB, adopt, can_ptrace, fds, foreign_threads, left_open, listening
from support.dap import DAPClient, stop_in_each_rank
from support.jobs import read_ranks, rtdebug
from support.paths import PY, ROOT, SCRIPTS, marker_line
from support.procs import kill_tree
from support.wait import until

pytestmark = pytest.mark.e2e


@contextmanager
def busy_plain(py: str, tmp_path: Path) -> Iterator[tuple[subprocess.Popen, Path, Path]]:
    """tests/scripts/adopt_plain.py under ``py``: two busy pure-Python ranks with RANK set, both running;
    (process, control file that ends them, log). Killed with its tree on the way out."""
    control, log = tmp_path / "control", tmp_path / "plain.log"
    with open(log, "wb") as f:
        proc = subprocess.Popen(
            [py, str(SCRIPTS / "adopt_plain.py"), str(control)], stdout=f, stderr=subprocess.STDOUT, cwd=tmp_path
        )
    try:
        until(lambda: log.read_text().count("running") >= 2, 60, "both ranks running", context=log.read_text)
        yield proc, control, log
    finally:
        if proc.poll() is None:
            kill_tree(proc)


def _session(registry_dir: Path) -> str:
    return next(p.name for p in registry_dir.iterdir() if (p / "session.json").exists())


def _cmdline(pid: int) -> list[str]:
    try:
        return psutil.Process(pid).cmdline()
    except psutil.Error:
        return []


def test_adopt_stop_in_each_rank_twice_is_noop_then_detach(plain, registry_dir, port_base):
    job = plain()
    pids = job.wait_running()
    fds_before = {p: fds(p) for p in pids}
    t0 = time.monotonic()
    r = adopt(str(job.agent().pid), "--debug-port-base", str(port_base))
    assert r.returncode == 0, r.stderr
    attachable_s = time.monotonic() - t0
    assert "adopted torchrun pid" in r.stdout, r.stdout
    assert "timeout is 1800 s (gloo default); it cannot be raised now" in r.stdout, r.stdout
    sid = _session(registry_dir)
    session = json.loads((registry_dir / sid / "session.json").read_text())
    assert session["mode"] == "adopted" and session["launcher_pid"] == job.agent().pid
    assert (session["pg_timeout_s"], session["pg_timeout_source"]) == (1800, "gloo default")
    _ps_shows_pg_timeout(sid, 1800, "gloo default")
    ranks = read_ranks(registry_dir, sid)
    assert {r["pid"] for r in ranks.values()} == set(pids) and all(r["state"] == "ready" for r in ranks.values())
    print(f"adopt -> every rank attachable: {attachable_s:.2f} s")
    _schema_problems(session, read_ranks(registry_dir, sid))

    again = adopt(str(pids[1]), "--debug-port-base", str(port_base + 8), "--json")  # a rank names the same job
    assert again.returncode == 0, again.stderr
    assert json.loads(again.stdout)["note"] == f"already adopted (session {sid}); nothing changed"
    assert len([p for p in registry_dir.iterdir() if p.is_dir()]) == 1 and not listening(port_base + 8)

    line = marker_line(JOB, "step")
    clients = {n: DAPClient("127.0.0.1", port_base + n) for n in (0, 1)}
    try:
        for c in clients.values():
            c.attach({str(JOB): [line]})
        stop_in_each_rank(clients, str(JOB), line, "dist.get_rank()")
    finally:
        for c in clients.values():
            c.disconnect()

    d = rtdebug("adopt", "--detach", sid)
    assert d.returncode == 0 and "the job runs on" in d.stdout, d.stdout + d.stderr
    assert not listening(port_base) and not listening(port_base + 1)
    deadline = time.monotonic() + 10  # pydevd's threads end on their own once told to
    while (left := foreign_threads(job.agent().pid)) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert not left, left  # no accept loop, no relay, no pydevd thread: nothing of rtdebug runs in the ranks
    # nothing left open either: no socket (endpoint, relay, pydevd's end, netlink), no fd on coll-N.bin
    assert {p: left_open(p, fds_before[p], registry_dir) for p in pids} == {p: [] for p in pids}
    _ps_shows_detached(sid, "detached")
    refused = rtdebug("attach", "--session", sid, "--rank", "0", "--timeout", "1")
    assert refused.returncode == 1 and f"rtdebug: error: no live session '{sid}'" in refused.stderr, refused.stderr
    assert job.finish() == 0, job.output()
    _ps_shows_detached(sid, "exited")  # once its process has ended
    assert "detached; nothing of rtdebug runs here now" in job.output()
    # torch's own collectives are back: the record's wrapper does no per-call work after a detach
    assert job.output().count("(collectives wrapped: False)") == 2, job.output()


def _ps_shows_detached(sid: str, state: str) -> None:
    """A detached session is not live (plain `ps` leaves it out); `ps --all` shows its ranks' ``state``."""
    ps = json.loads(rtdebug("ps", "--all", "--json").stdout)
    assert sid not in [s["session_id"] for s in ps["sessions"]]
    ended = next(s for s in ps["ended"] if s["session_id"] == sid)
    assert ended["state"] == "stopped" and {r["state"] for r in ended["ranks"]} == {state}, ended
    rows = [line.split() for line in rtdebug("ps", "--all").stdout.splitlines() if "127.0.0.1:" in line]
    assert len(rows) == 2 and all(row[4] == state for row in rows), rows


def _ps_shows_pg_timeout(sid: str, seconds: float, source: str) -> None:
    """`ps --json` carries the adopted job's timeout and its source (B2); `ps` shows them on the session line."""
    ps = rtdebug("ps", "--json")
    session = next(s for s in json.loads(ps.stdout)["sessions"] if s["session_id"] == sid)
    assert (session["pg_timeout_s"], session["pg_timeout_source"]) == (seconds, source), session
    line = next(line for line in rtdebug("ps").stdout.splitlines() if line.startswith(f"session {sid}"))
    assert line.endswith(f"pg-timeout {seconds:g}s ({source})"), line


def _two_groups(text: str) -> None:
    assert "rank 0: all_reduce" in text, text
    assert "rank 1: wait_quietly" in text, text


def test_hung_job_adopt_stacks_and_attach_rank1(plain, registry_dir, port_base):
    job = plain(env={"ADOPT_HANG": "1", "ADOPT_PG_TIMEOUT": "900"})
    job.wait_running()
    before = until(  # rank 1 skipped step 5; rank 0 blocks in the gloo all_reduce
        lambda: rtdebug("stacks", "--pid", str(job.agent().pid)),
        60,
        "rank 0 blocked in all_reduce and rank 1 in wait_quietly (rtdebug stacks --pid)",
        ok=lambda r: r.returncode == 0 and "rank 0: all_reduce" in r.stdout and "rank 1: wait_quietly" in r.stdout,
        every=0.5,
    )
    _two_groups(before.stdout)
    r = adopt(str(job.agent().pid), "--debug-port-base", str(port_base))
    assert r.returncode == 0, r.stderr
    assert "process-group timeout is 900 s (gloo, set by the job)" in r.stdout, r.stdout  # read in the rank
    _ps_shows_pg_timeout(_session(registry_dir), 900, "gloo, set by the job")
    s = rtdebug("stacks")
    assert s.returncode == 0, s.stderr
    _two_groups(s.stdout)
    labels = [
        [(g["ranks"], g["label"], g["departs_at"]) for g in json.loads(r.stdout)["groups"]]
        for r in (rtdebug("stacks", "--pid", str(job.agent().pid), "--json"), rtdebug("stacks", "--json"))
    ]
    assert labels[0] == labels[1], labels  # py-spy (un-adopted) and the signal dump (adopted) agree
    c = DAPClient("127.0.0.1", port_base + 1)
    try:
        c.attach({str(JOB): [JOB.read_text().splitlines().index("    while not control.exists():") + 1]})
        stopped = c.wait_stopped(60)
        frame = c.top_frame(stopped["threadId"])
        assert frame["name"] == "wait_quietly"
        assert c.evaluate("__import__('torch.distributed').distributed.get_rank()", frame["id"]) == "1"
    finally:
        c.disconnect()


@pytest.mark.skipif(os.environ.get("RTDEBUG_FULL") != "1", reason="RTDEBUG_FULL=1: a healthy adopted job, 10 stacks")
def test_healthy_adopted_job_is_never_called_hung(plain, registry_dir, port_base):
    """Issue 43 item 5, after adopt: the ranks step through all_reduce; one instant would often catch rank 0 in
    it while rank 1 sleeps between steps (a verdict naming rank 1). ``stacks`` looks twice: never a verdict."""
    job = plain()
    job.wait_running()
    r = adopt(str(job.agent().pid), "--debug-port-base", str(port_base))
    assert r.returncode == 0, r.stderr
    states = []
    for _ in range(10):
        out = rtdebug("stacks", "--json")
        assert out.returncode == 0, out.stderr
        snap = json.loads(out.stdout)
        assert (snap["verdict"], snap["culprit"]) == (None, None), snap["verdict"]
        states.append(snap["motion"]["state"])
    assert set(states) <= {"moving", "none"} and job.proc.poll() is None, states


def test_refusals_leave_the_job_untouched(plain, registry_dir, port_base, tmp_path, monkeypatch):
    if os.geteuid() != 0 or shutil.which("setpriv") is None or not Path("/usr/bin/python3").exists():
        pytest.skip("another uid's process needs root, setpriv and /usr/bin/python3")
    # another uid's process that looks like a torchrun agent (the venv's Python lives under /root, which
    # uid nobody cannot read, so a real job of nobody's cannot start here): refused by its owner alone
    fake = ["/usr/bin/python3", "-c", "import time; time.sleep(120)", "torch.distributed.run"]
    other = subprocess.Popen(["setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups", *fake])
    try:
        until(
            lambda: _cmdline(other.pid), 30, "setpriv exec'd the fake agent", ok=lambda c: "torch.distributed.run" in c
        )
        r = adopt(str(other.pid), "--debug-port-base", str(port_base))
        assert r.returncode == 1 and len(r.stderr.strip().splitlines()) == 1, r.stderr
        assert "belongs to uid" in r.stderr and not any(registry_dir.glob("*/session.json"))
        assert other.poll() is None
    finally:
        other.kill()
        other.wait()

    mine = plain()
    mine.wait_running()
    agent = mine.agent().pid
    nogdb = tmp_path / "bin"
    nogdb.mkdir()
    r = adopt(str(agent), env={"RTDEBUG_INJECT": "gdb", "PATH": str(nogdb)})
    assert r.returncode == 1 and "apt-get install gdb" in r.stderr and len(r.stderr.strip().splitlines()) == 1

    # ptrace denied: simulated (this machine has no yama and runs as root); the same check refuses
    real = inject.ptrace_denied
    monkeypatch.setattr(inject, "ptrace_denied", lambda pid: real(pid, scope=1, cap=False))
    from rtdebug import cli

    assert cli.main(["adopt", str(agent), "--debug-port-base", str(port_base)]) == 1
    assert not any(registry_dir.glob("*/session.json"))
    assert all("adopted" not in line for line in mine.output().splitlines())
    assert mine.finish() == 0, mine.output()
    assert ROOT.exists()


def test_choose_and_refusal_lines():
    assert inject.choose((3, 11), "x86_64", True, False) == "ptrace"
    assert inject.choose((3, 12), "aarch64", True, False) == "gdb"
    assert inject.choose((3, 14), "aarch64", False, True) == "remote_exec"
    assert inject.choose((3, 13), "aarch64", False, True) == "gdb"  # and gdb's absence is refused by name
    assert "ptrace_scope = 1" in (inject.ptrace_denied(1, scope=1, cap=False) or "")
    assert inject.ptrace_denied(1, scope=1, cap=True) is None
    assert "= 3" in (inject.ptrace_denied(1, scope=3, cap=True) or "")
    assert inject_gdb.c_string('a"b\\c\nd') == '"a\\"b\\\\c\\nd"'
    script = inject_gdb.gdb_script('print("x")')  # a pending call only: gdb never waits on the GIL
    assert script.count('"print(\\"x\\")"') == 1 and [line.strip() for line in script.splitlines()].count("end") == 1
    assert "PyGILState_Ensure" not in script and "Py_AddPendingCall" in script
    if shutil.which("gdb"):  # the whole if/else block parses (gdb reads it before running any of it)
        probe = script.replace("set $init = (int)Py_IsInitialized()", "set $init = 0")
        path = Path(tempfile.mkdtemp()) / "probe.gdb"
        path.write_text(probe)
        out = subprocess.run(["gdb", "-nx", "--batch", "-x", str(path)], capture_output=True, text=True)
        assert "RTDEBUG_NOT_INITIALIZED" in out.stdout, out.stdout + out.stderr


def test_one_rank_failing_undoes_the_others(plain, registry_dir, port_base, monkeypatch, capsys):
    """Rank 1's injection fails after rank 0 was adopted: rank 0 is detached again, no session is left."""
    job = plain()
    pids = job.wait_running()
    real = inject.run

    def run(pid: int, code: str, method: str, guard, box) -> None:
        if pid == pids[1] and "m.main(" in code:
            raise HarnessError(f"pid {pid}: simulated injection failure")
        real(pid, code, method, guard, box)

    monkeypatch.setattr(inject, "run", run)
    from rtdebug import cli

    assert cli.main(["adopt", str(job.agent().pid), "--debug-port-base", str(port_base)]) == 1
    err = capsys.readouterr().err
    assert "simulated injection failure" in err and "nothing was changed" in err and len(err.splitlines()) == 1
    assert not any(p.is_dir() for p in registry_dir.iterdir())
    assert not listening(port_base) and not listening(port_base + 1)
    out = job.output()
    assert "rank 0 adopted" in out and "rank 0 detached" in out and "rank 1 adopted" not in out, out
    assert job.finish() == 0, out


def test_without_pid_lists_the_candidates(monkeypatch, capsys):
    from rtdebug import cli

    fake = [jobs.Job(100 + i, time.time() - 65, f"train{i}.py", [jobs.RankProc(200 + i, 0.0, {"RANK": "0"})])
            for i in range(2)]  # fmt: skip
    monkeypatch.setattr(jobs, "candidates", lambda: fake)
    assert cli.main(["adopt"]) == 2
    err = capsys.readouterr().err.splitlines()
    assert err[0].strip().startswith("pid 100  train0.py  1 ranks  running 1m0") and len(err) == 3
    assert err[-1].startswith("rtdebug: error: 2 torchrun jobs run here (listed above); name one")
    monkeypatch.setattr(jobs, "candidates", lambda: [])
    assert cli.main(["adopt"]) == 1
    none = "no torchrun job or Ray Train worker of yours runs on this machine"
    assert capsys.readouterr().err == f"rtdebug: error: {none}\n"


def test_adopted_job_that_ends_reads_exited(plain, registry_dir, port_base):
    job = plain()
    job.wait_running()
    assert adopt(str(job.agent().pid), "--debug-port-base", str(port_base)).returncode == 0
    sid = _session(registry_dir)
    assert job.finish() == 0, job.output()
    ps = rtdebug("ps", "--all", "--json")
    assert ps.returncode == 0, ps.stderr
    assert f"session {sid}" not in rtdebug("ps").stdout
    session = json.loads((registry_dir / sid / "session.json").read_text())
    assert session["state"] == "exited", session
    assert {r["state"] for r in read_ranks(registry_dir, sid).values()} == {"exited"}


def test_refusal_lines_for_old_or_stripped_pythons(monkeypatch):
    me = os.getpid()
    monkeypatch.setattr(inject, "ptrace_denied", lambda pid: None)
    monkeypatch.setattr(inject, "python_version", lambda pid: (3, 9))
    assert inject.refusal(me, "ptrace") == f"pid {me} runs Python 3.9; adopting needs Python 3.10 or newer"
    monkeypatch.setattr(inject, "python_version", lambda pid: (3, 11))
    monkeypatch.setattr(inject.elfsyms, "resolve", lambda pid, names, image=None: {"Py_IsInitialized": 1})
    why = inject.refusal(me, "ptrace") or ""
    assert "exports no PyGILState_Check, PyGILState_Ensure" in why and "without symbols" in why
    sleeper = subprocess.Popen(["sleep", "60"])
    try:
        os.kill(sleeper.pid, signal.SIGSTOP)
        until(
            lambda: psutil.Process(sleeper.pid).status(), 30, "sleep stopped", ok=lambda s: s == psutil.STATUS_STOPPED
        )
        assert "is stopped (SIGSTOP or a debugger)" in (inject.refusal(sleeper.pid, "ptrace") or "")
    finally:
        sleeper.kill()
        sleeper.wait()
    monkeypatch.setenv("PATH", "/nonexistent")
    assert inject.refusal(me, "gdb") == "gdb is not installed (Debian/Ubuntu: apt-get install gdb)"


PYENV = Path(os.environ.get("PYENV_ROOT", Path.home() / ".pyenv")) / "versions"


def _python(version: str) -> str | None:
    found = sorted(PYENV.glob(f"{version}.*/bin/python{version}"))
    return str(found[-1]) if found else shutil.which(f"python{version}")


@pytest.mark.parametrize("version", ["3.10", "3.11", "3.12", "3.13"])
def test_torch_free_job_on_each_python(version, registry_dir, port_base, tmp_path):
    """A bare Python (no rtdebug, no debugpy installed in it) running a plain multi-process job with RANK set:
    adopt by a rank's pid, stop in rank 1, detach; the busy loop's arithmetic is still right."""
    py = _python(version)
    if py is None or (why := can_ptrace()) is not None:
        pytest.skip(f"no python{version}" if py is None else why)
    script = SCRIPTS / "adopt_plain.py"
    with busy_plain(py, tmp_path) as (proc, control, log):
        rank1 = jobs.job_of(psutil.Process(proc.pid)).ranks[1].pid
        r = adopt(str(rank1), "--debug-port-base", str(port_base))
        assert r.returncode == 0, r.stdout + r.stderr + log.read_text()
        sid = _session(registry_dir)
        line = marker_line(script, "plain step")
        c = DAPClient("127.0.0.1", port_base + 1)
        try:
            c.attach({str(script): [line]})
            stop_in_each_rank({1: c}, str(script), line, "rank")
        finally:
            c.disconnect()
        d = rtdebug("adopt", "--detach", sid)
        assert d.returncode == 0, d.stderr
        control.touch()
        assert proc.wait(60) == 0, log.read_text()
        assert log.read_text().count(": ok") == 2


def test_python_too_old_is_refused(registry_dir, port_base, tmp_path):
    py = _python("3.9")
    if py is None or (why := can_ptrace()) is not None:
        pytest.skip("no python3.9" if py is None else why)
    up = tmp_path / "up"
    code = f"import pathlib, time; pathlib.Path({str(up)!r}).touch(); time.sleep(60)"
    proc = subprocess.Popen([py, "-c", code], env=dict(os.environ, RANK="0"))
    parent = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])  # noqa: F841
    try:
        until(up.exists, 60, "python3.9 up (its interpreter initialised)")
        r = adopt(str(proc.pid), "--debug-port-base", str(port_base))
        assert r.returncode == 1 and f"pid {proc.pid} runs Python 3.9" in r.stderr, r.stderr
        assert len(r.stderr.strip().splitlines()) == 1 and not any(registry_dir.glob("*/session.json"))
    finally:
        for p in (proc, parent):
            p.kill()
            p.wait()


def test_detach_while_a_client_holds_a_rank_stopped(plain, registry_dir, port_base):
    """`rtdebug stop` of an adopted session detaches (the job was never rtdebug's to end), here with rank 0
    stopped at a breakpoint by a connected client: the rank resumes, the client's connection ends, no
    rtdebug or debugger thread is left, `ps` lists the session no more, and the job finishes with exit 0."""
    job = plain()
    job.wait_running()
    assert adopt(str(job.agent().pid), "--debug-port-base", str(port_base)).returncode == 0
    sid = _session(registry_dir)
    line = marker_line(JOB, "step")
    c = DAPClient("127.0.0.1", port_base)
    try:
        c.attach({str(JOB): [line]})
        c.wait_stopped(60)
        d = rtdebug("stop", "--session", sid)
        assert d.returncode == 0 and f"rtdebug: session {sid} detached from 2 ranks; the job runs on" in d.stdout, (
            d.stdout + d.stderr
        )
        assert json.loads(rtdebug("ps", "--json").stdout)["sessions"] == []
        deadline = time.monotonic() + 10
        while (left := foreign_threads(job.agent().pid)) and time.monotonic() < deadline:
            time.sleep(0.5)
        assert not left, left
    finally:
        c.close()
    assert not listening(port_base)
    assert job.finish() == 0, job.output()


def _schema_problems(session: dict, ranks: dict) -> None:
    """Adopted entries validate against the registry schema (mode "adopted", pg_timeout_s, nccl_heartbeat_s)."""
    jsonschema = pytest.importorskip("jsonschema")
    schema = json.loads((ROOT / "harness/rtdebug/registry/registry.schema.json").read_text())
    defs = schema.get("$defs", {})
    for entry, name in [(session, "session"), *[(r, "rank") for r in ranks.values()]]:
        sub = dict(defs[name], **{"$defs": defs})
        errors = [e.message for e in jsonschema.Draft202012Validator(sub).iter_errors(entry)]
        assert errors == [], errors


def test_ptrace_denied_without_cap_sys_ptrace(plain, registry_dir, port_base):
    """A real refusal: the ranks are not dumpable and the adopting process has no CAP_SYS_PTRACE (dropped
    with setpriv when this runs as root). One line naming the capability; the job runs on untouched."""
    job = plain(env={"ADOPT_NODUMP": "1"})
    job.wait_running()
    drop = ["setpriv", "--bounding-set=-sys_ptrace", "--inh-caps=-sys_ptrace"] if os.geteuid() == 0 else []
    if drop and shutil.which("setpriv") is None:
        pytest.skip("needs setpriv to drop CAP_SYS_PTRACE")
    cmd = [*drop, PY, "-m", "rtdebug", "adopt", str(job.agent().pid), "--debug-port-base", str(port_base)]
    r = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert r.returncode == 1 and len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert "CAP_SYS_PTRACE" in r.stderr and "nothing was changed" in r.stderr, r.stderr
    assert not any(p.is_dir() for p in registry_dir.iterdir()) if registry_dir.exists() else True
    assert not listening(port_base) and "adopted" not in job.output()
    assert job.finish() == 0, job.output()


def test_adopt_detach_cycles_leave_busy_ranks_correct(registry_dir, port_base, tmp_path):
    """Adopt and detach a busy pure-Python job again and again (RTDEBUG_ADOPT_CYCLES, default 8; 25 were run
    on 3.13): every injection stops a rank mid-bytecode, and the ranks' checked arithmetic stays right."""
    if (why := can_ptrace()) is not None:
        pytest.skip(why)
    with busy_plain(PY, tmp_path) as (proc, control, log):
        rank0 = jobs.job_of(psutil.Process(proc.pid)).ranks[0].pid
        for _ in range(int(os.environ.get("RTDEBUG_ADOPT_CYCLES", "8"))):
            r = adopt(str(rank0), "--debug-port-base", str(port_base), "--json")
            assert r.returncode == 0, r.stderr
            d = rtdebug("adopt", "--detach", json.loads(r.stdout)["session_id"])
            assert d.returncode == 0, d.stderr
        control.touch()
        assert proc.wait(60) == 0, log.read_text()
        assert log.read_text().count(": ok") == 2


@pytest.mark.skipif(
    os.environ.get("RTDEBUG_FULL") != "1",
    reason="RTDEBUG_FULL=1: on this machine torchrun's restarted gloo attempts often fail to connect their mesh "
    "(with or without rtdebug), so this passes about one run in three",
)
def test_ranks_restarted_by_torchrun_are_adopted_into_the_same_session(plain, registry_dir, port_base):
    job = plain(extra=("--max-restarts", "5"))
    first = job.wait_running()
    assert adopt(str(job.agent().pid), "--debug-port-base", str(port_base)).returncode == 0
    sid = _session(registry_dir)
    job.control.with_suffix(".crash").touch()  # rank 1 exits 3; torchrun restarts both ranks
    deadline, now = time.monotonic() + 150, []
    while time.monotonic() < deadline:
        assert job.proc.poll() is None, job.output()
        now = [r.pid for r in jobs.job_of(job.agent()).ranks]
        if len(now) == 2 and not set(now) & set(first) and all(f"pid {p} running" in job.output() for p in now):
            break
        time.sleep(0.3)
    else:
        raise AssertionError(job.output())
    r = adopt(str(job.agent().pid), "--debug-port-base", str(port_base + 8))  # the session's ports are kept
    assert r.returncode == 0 and f"session {sid}: adopted its 2 ranks" in r.stdout, r.stdout + r.stderr
    ranks = read_ranks(registry_dir, sid)
    assert [ranks[n]["pid"] for n in (0, 1)] == now and all(ranks[n]["port"] == port_base + n for n in (0, 1))
    assert listening(port_base) and listening(port_base + 1)
    assert adopt(str(now[0])).stdout.startswith(f"rtdebug: already adopted (session {sid})")
    assert job.finish() == 0, job.output()


def _listed(agent: int) -> dict | None:
    r = rtdebug("adopt", "--list", "--json")
    assert r.returncode == 0 and r.stderr == "", r.stderr
    return next((j for j in json.loads(r.stdout) if j["pid"] == agent), None)


def test_list_shows_a_plain_job_then_its_adoption(plain, registry_dir, port_base):
    """`adopt --list --json` (the VS Code picker's source): a real plain torchrun job with its pid, script
    and ranks; after `adopt`, the session that adopted it; after the detach, none again."""
    job = plain()
    pids = job.wait_running()
    agent = job.agent().pid
    entry = _listed(agent)
    assert entry is not None and entry["kind"] == "torchrun" and entry["script"].endswith("adopt_job.py"), entry
    assert entry["ranks"] == [0, 1] and entry["world_size"] == 2 and entry["adopted_session"] is None, entry
    assert 0 < entry["running_s"] < time.time() - psutil.Process(agent).create_time() + 5
    assert adopt(str(pids[0]), "--debug-port-base", str(port_base)).returncode == 0
    sid = _session(registry_dir)
    assert (_listed(agent) or {}).get("adopted_session") == sid
    text = rtdebug("adopt", "--list").stdout.splitlines()
    assert text[0].split() == ["PID", "KIND", "RANKS", "RUNNING", "ADOPTED", "SCRIPT"], text
    assert any(line.split()[:3] == [str(agent), "torchrun", "0,1/2"] and sid in line for line in text), text
    assert rtdebug("adopt", "--detach", sid).returncode == 0
    assert (_listed(agent) or {}).get("adopted_session", "gone") is None
    assert job.finish() == 0, job.output()


def test_list_is_junk_free(tmp_path, monkeypatch, capsys):
    """Lookalikes are not jobs: an "agent" whose child's RANK is junk, one whose rank runs under rtdebug
    already (nothing to adopt). With no job at all: `[]` and exit 0, one plain line without --json."""
    code = (
        "import os, subprocess, sys, time\n"
        "env = dict(os.environ, RANK=sys.argv[1], RTDEBUG_SESSION=sys.argv[2])\n"
        "child = subprocess.Popen(['sleep', '60'], env=env)\n"
        "print('up', flush=True)\ntime.sleep(60)\n"
    )
    fakes = [
        subprocess.Popen([PY, "-c", code, rank, sid, "torch.distributed.run"], stdout=subprocess.PIPE)
        for rank, sid in (("x1", ""), ("0", "20260101-000000-abcd"))
    ]
    try:
        for f in fakes:
            assert f.stdout is not None and f.stdout.readline() == b"up\n"
        r = rtdebug("adopt", "--list", "--json")
        assert r.returncode == 0 and r.stderr == "", r.stderr
        assert not {j["pid"] for j in json.loads(r.stdout)} & {f.pid for f in fakes}, r.stdout
    finally:
        for f in fakes:
            kill_tree(f)
    from rtdebug import cli

    monkeypatch.setattr(jobs, "candidates", lambda: [])
    assert cli.main(["adopt", "--list", "--json"]) == 0
    assert capsys.readouterr().out == "[]\n"
    assert cli.main(["adopt", "--list"]) == 0
    assert capsys.readouterr().out == "no torchrun job or Ray Train worker of yours runs on this machine\n"
    assert cli.main(["adopt", "--list", "123"]) == 2
    assert capsys.readouterr().err == "rtdebug: error: adopt --list takes no PID and no --detach\n"


def test_adopt_again_after_a_debugged_detach(registry_dir, port_base, tmp_path):
    """A rank a client debugged, then detached, can be adopted and debugged again: the detach lets
    debugpy listen once more (it refuses a second ``listen`` in a process unless told it may)."""
    if (why := can_ptrace()) is not None:
        pytest.skip(why)
    script = SCRIPTS / "adopt_plain.py"
    line = marker_line(script, "plain step")
    with busy_plain(PY, tmp_path) as (proc, control, log):
        rank0 = jobs.job_of(psutil.Process(proc.pid)).ranks[0].pid
        for base in (port_base, port_base + 4):
            r = adopt(str(rank0), "--debug-port-base", str(base), "--json")
            assert r.returncode == 0, r.stderr
            c = DAPClient("127.0.0.1", base)
            try:
                c.attach({str(script): [line]})
                stop_in_each_rank({0: c}, str(script), line, "rank")
            finally:
                c.disconnect()
            d = rtdebug("adopt", "--detach", json.loads(r.stdout)["session_id"])
            assert d.returncode == 0, d.stderr
        control.touch()
        assert proc.wait(60) == 0, log.read_text()
        assert log.read_text().count(": ok") == 2
