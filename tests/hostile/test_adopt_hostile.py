"""``rtdebug adopt`` against the ranks users really run, and against another local user (hostile campaign).

The rank is ``tests/scripts/adopt_gil.py``: a torch-free rank whose GIL a C call holds (a blocking ``read``
through ``ctypes.PyDLL``) for exactly as long as the test wants, either in another thread while the main
thread waits for the GIL in a system call, or in the main thread itself. Each case checks that the rank
lives and keeps its loop (its checked arithmetic still right: registers put back), that nothing is left
in ``/tmp`` or in the registry, and one line for the user.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import tempfile
import threading
import time
from pathlib import Path

import pytest

from rtdebug.inject import runner as inject
from rtdebug.inject import sigdefer

from support.paths import PY, ROOT, SCRIPTS
from support.procs import kill_tree
from support.sigs import default_dispositions
from support.users import NOBODY

pytestmark = pytest.mark.e2e
GIL = SCRIPTS / "adopt_gil.py"


def _wait(what, timeout: float = 60.0, why: str = ""):
    deadline = time.monotonic() + timeout
    while not (value := what()):
        assert time.monotonic() < deadline, why or "condition never held"
        time.sleep(0.02)
    return value


class GilRank:
    """One adopt_gil.py rank; ``hold()`` makes its C call take the GIL, ``release()`` ends that call."""

    def __init__(self, tmp: Path, where: str) -> None:
        self.control, self.log = tmp / "control", tmp / "rank.log"
        with open(self.log, "wb") as f:
            self.proc = subprocess.Popen([PY, str(GIL), str(self.control), where], stdout=f, stderr=subprocess.STDOUT,
                                         preexec_fn=default_dispositions)  # fmt: skip
        out = _wait(lambda: "running" in self.output() and self.output(), why="the rank never started")
        self.pid = int(out.split(" pid ")[1].split()[0])

    def output(self) -> str:
        return self.log.read_text(errors="replace")

    def hold(self) -> None:
        os.mkfifo(f"{self.control}.gil")
        _wait(lambda: "holding the GIL" in self.output(), why=self.output())

    def release(self) -> None:
        fd = os.open(f"{self.control}.gil", os.O_WRONLY)
        os.write(fd, b"x")
        os.close(fd)
        _wait(lambda: "released the GIL" in self.output(), why=self.output())

    def threads(self) -> int:
        return len(os.listdir(f"/proc/{self.pid}/task"))

    def finish(self) -> str:
        """End the loop; the rank's output (asserted: exit 0, arithmetic right)."""
        self.control.touch()
        assert self.proc.wait(60) == 0, self.output()
        out = self.output()
        assert "done after" in out and ": ok" in out, out
        return out


@pytest.fixture
def gil_rank(tmp_path, registry_dir):
    if (why := inject.ptrace_denied(os.getpid())) is not None:
        pytest.skip(why)
    started: list[GilRank] = []

    def start(where: str = "thread", tmp: Path | None = None) -> GilRank:
        r = GilRank(tmp or tmp_path, where)
        started.append(r)
        return r

    yield start
    for r in started:
        kill_tree(r.proc)


def _adopt(*args: str, env: dict[str, str] | None = None, tmp: Path | None = None) -> subprocess.Popen:
    """``rtdebug adopt ...`` in the background; its stderr's first line is read by the caller. ``tmp``: its
    TMPDIR (anything it would put in ``/tmp`` shows there). The signals a test sends it are default in it,
    however the suite was started."""
    e = dict(os.environ, **(env or {}), **({"TMPDIR": str(tmp)} if tmp else {}))
    return subprocess.Popen(
        [PY, "-m", "rtdebug", "adopt", *args], cwd=ROOT, env=e, text=True, stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, preexec_fn=default_dispositions,
    )  # fmt: skip


def _waiting_line(p: subprocess.Popen, pid: int) -> None:
    """adopt's note that it is waiting for ``pid``'s answer: the code is in, no thread of the rank is held."""
    assert p.stderr is not None
    line = p.stderr.readline()
    assert line.startswith(f"rtdebug: waiting for pid {pid}: it has not run Python since"), line


def _private_tmp(tmp_path: Path) -> Path:
    d = tmp_path / "tmpdir"
    d.mkdir()
    return d


def _leftovers(registry: Path) -> list[str]:
    return sorted(p.name for p in registry.iterdir() if p.name != ".lock") if registry.exists() else []


def _tracer(pid: int) -> str:
    status = Path(f"/proc/{pid}/status").read_text()
    return next(line.split()[1] for line in status.splitlines() if line.startswith("TracerPid:"))


@pytest.mark.parametrize(
    "sig,where", [("SIGHUP", "thread"), ("SIGHUP", "main"), ("SIGINT", "thread"), ("SIGTERM", "main")]
)
def test_interrupted_adopt_puts_the_rank_back_and_leaves_nothing(gil_rank, registry_dir, port_base, tmp_path, sig,
                                                                 where):  # fmt: skip
    """A closed terminal, Ctrl-C or kill while adopt waits on a rank whose GIL a C call holds (in another
    thread, or in its main thread): adopt exits 128 + N with one line; no thread is left held; when the GIL
    comes back, the code that was queued or started for it finds its request gone and does nothing."""
    tmp = _private_tmp(tmp_path)
    rank = gil_rank(where)
    rank.hold()
    p = _adopt(str(rank.pid), "--debug-port-base", str(port_base), tmp=tmp)
    _waiting_line(p, rank.pid)
    assert _tracer(rank.pid) == "0"  # adopt holds no thread of the rank while it waits
    signum = getattr(signal, sig)
    t0 = time.monotonic()
    p.send_signal(signum)
    out, err = p.communicate(timeout=60)
    print(f"{sig} -> adopt exited in {time.monotonic() - t0:.3f} s")
    assert p.returncode == 128 + signum, err
    assert err == f"rtdebug: error: interrupted by {sig}; the job was left as it was (nothing was changed)\n"
    assert _leftovers(registry_dir) == [] and os.listdir(tmp) == []
    assert rank.proc.poll() is None, rank.output()
    rank.release()
    _wait(lambda: rank.threads() == 1, why="a thread of rtdebug's never ended")  # the late one came and went
    out = rank.finish()
    assert "adopted" not in out and _leftovers(registry_dir) == [], out


def _as_nobody(action) -> None:
    """Run ``action()`` in a child process as uid/gid 65534 (the attacker); it must succeed."""
    pid = os.fork()
    if pid == 0:  # pragma: no cover  (child)
        default_dispositions()
        code = 1
        try:
            os.setgroups([])
            os.setgid(NOBODY)
            os.setuid(NOBODY)
            action()
            code = 0
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0, "the attacker's step failed"


@pytest.fixture
def shared_parent():
    """A registry whose parent another user can write (a mis-set ``RTDEBUG_REGISTRY_DIR``), and a root-owned
    0600 file that user wants overwritten."""
    if os.geteuid() != 0:
        pytest.skip("acting as another uid needs root")
    base = Path(tempfile.mkdtemp(prefix="adopt-race-"))
    base.chmod(0o755)
    shared = base / "shared"
    shared.mkdir()
    shared.chmod(0o777)
    victim = base / "victim"
    victim.write_text("precious")
    victim.chmod(0o600)
    yield shared / "reg", victim
    subprocess.run(["rm", "-rf", str(base)], check=False)


def _plant(reg: Path, box: str, pid: int, victim: Path) -> None:
    """As the attacker: move the registry aside and put in its place one of theirs, with the box the late
    code will look for, its request, and symlinks to ``victim`` at every answer name."""

    def action() -> None:
        os.rename(reg, reg.with_name("reg.old"))
        os.mkdir(reg, 0o777)
        os.mkdir(reg / box, 0o777)
        (reg / box / f"{pid}.req").touch()
        for name in (f"{pid}.tmp", f"{pid}.json", f"{pid}.json.tmp"):
            os.symlink(victim, reg / box / name)

    _as_nobody(action)


def _box_name(reg: Path) -> str:
    return _wait(lambda: next((p.name for p in reg.iterdir() if p.name.startswith(".inject-")), None))


def test_a_late_adopt_writes_nowhere_another_user_points_it(gil_rank, shared_parent, port_base):
    """The main thread holds the GIL past adopt's answer time: adopt gives up ("nothing was changed") and
    removes its box; another uid then puts a registry of theirs in its place, symlinks included. When the
    queued call runs at last, it finds that box is not the one adopt made: nothing is written, nothing is
    adopted, the root-owned file is untouched."""
    reg, victim = shared_parent
    rank = gil_rank("main")
    rank.hold()
    env = {"RTDEBUG_REGISTRY_DIR": str(reg), inject.ANSWER_ENV: "3"}
    p = _adopt(str(rank.pid), "--debug-port-base", str(port_base), env=env)
    _waiting_line(p, rank.pid)
    box = _box_name(reg)
    _, err = p.communicate(timeout=60)
    assert p.returncode == 1, err
    assert err.endswith(f"rtdebug: error: cannot adopt pid {rank.pid}: no answer within 3 s (its main thread has not "
                        "run Python since); nothing ran there; nothing was changed\n"), err  # fmt: skip
    assert _leftovers(reg) == []
    _plant(reg, box, rank.pid, victim)
    rank.release()  # the queued call runs now, before the loop's next step
    out = rank.finish()
    assert victim.read_text() == "precious" and oct(victim.stat().st_mode & 0o777) == "0o600"
    assert sorted(os.listdir(reg / box)) == sorted([f"{rank.pid}.req", f"{rank.pid}.tmp", f"{rank.pid}.json",
                                                    f"{rank.pid}.json.tmp"])  # fmt: skip
    assert "adopted" not in out, out


def test_a_late_detach_still_detaches_but_answers_no_one(gil_rank, shared_parent, port_base):
    """The same race on detach's answer: detach gives up while another thread holds the rank's GIL; the
    attacker swaps the registry. The late detach still detaches (undoing is always wanted), writes nothing
    into the attacker's directories, and its final entry lands in the owner's own session directory (by
    its fd), not where the swapped path now leads."""
    reg, victim = shared_parent
    rank = gil_rank("thread")
    env = {"RTDEBUG_REGISTRY_DIR": str(reg), inject.ANSWER_ENV: "3"}
    a = subprocess.run([PY, "-m", "rtdebug", "adopt", str(rank.pid), "--debug-port-base", str(port_base), "--json"],
                       cwd=ROOT, env=dict(os.environ, **env), capture_output=True, text=True, timeout=120)  # fmt: skip
    assert a.returncode == 0, a.stderr
    sid = json.loads(a.stdout)["session_id"]
    rank.hold()
    p = subprocess.Popen([PY, "-m", "rtdebug", "adopt", "--detach", sid], cwd=ROOT, env=dict(os.environ, **env),
                         text=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         preexec_fn=default_dispositions)  # fmt: skip
    box = _box_name(reg)
    _, err = p.communicate(timeout=60)
    assert p.returncode == 1 and f"could not detach pid {rank.pid}: no answer within 3 s" in err, err
    _plant(reg, box, rank.pid, victim)
    rank.release()
    _wait(lambda: "detached; nothing of rtdebug runs here now" in rank.output(), why=rank.output())
    assert victim.read_text() == "precious"
    assert sorted(os.listdir(reg)) == [box], os.listdir(reg)  # no session directory made in theirs
    assert len(os.listdir(reg / box)) == 4
    entry = json.loads((reg.with_name("reg.old") / sid / "rank-0.json").read_text())
    assert entry["state"] == "detached", entry
    rank.finish()


def test_a_rank_that_ends_during_adopt_gets_one_line(gil_rank, registry_dir, port_base, tmp_path):
    """The rank dies while adopt waits for its answer: one line at once, not a traceback nor the full
    answer time; nothing left behind."""
    tmp = _private_tmp(tmp_path)
    rank = gil_rank("main")
    rank.hold()
    p = _adopt(str(rank.pid), "--debug-port-base", str(port_base), tmp=tmp)
    _waiting_line(p, rank.pid)
    t0 = time.monotonic()
    os.kill(rank.pid, signal.SIGKILL)
    _, err = p.communicate(timeout=60)
    print(f"rank killed -> adopt exited in {time.monotonic() - t0:.3f} s")
    assert p.returncode == 1
    assert err == f"rtdebug: error: cannot adopt pid {rank.pid}: pid {rank.pid} has ended; nothing was changed\n"
    assert _leftovers(registry_dir) == [] and os.listdir(tmp) == []


def test_a_pid_that_has_ended_is_one_line_everywhere(tmp_path):
    gone = subprocess.Popen([PY, "-c", "pass"], preexec_fn=default_dispositions)
    gone.wait()
    assert inject.refusal(gone.pid, "ptrace") == f"pid {gone.pid} has ended"
    reg = tmp_path / "reg"
    reg.mkdir(mode=0o700)
    answers = inject.run_all([gone.pid], {gone.pid: "result = {}"}, "ptrace", reg)
    assert answers == {gone.pid: {"status": "error", "error": f"pid {gone.pid} has ended"}}
    assert os.listdir(reg) == []


_HOLD_CALL = """
import sys
from rtdebug.inject import elfsyms, ptrace, sigdefer
pid = int(sys.argv[1])
usleep = elfsyms.resolve_c(pid, {"usleep"})["usleep"]
with sigdefer.deferred() as guard:
    t = ptrace.Tracee(pid)
    try:
        print("calling", flush=True)
        t.call(usleep, 1_500_000)
    finally:
        t.release()
    print("released", flush=True)
try:
    guard.check()
except sigdefer.Interrupted as exc:
    sys.exit(exc.exit_code)
"""


@pytest.mark.parametrize("sig", ["SIGHUP", "SIGINT", "SIGTERM"])
def test_a_signal_during_a_held_call_waits_for_it_then_puts_the_thread_back(gil_rank, sig):
    """The mechanism under adopt, with a call that lasts (``usleep`` in the rank's main thread): the signal
    comes mid-call, the shell lets the call return, restores the registers, detaches, then exits 128 + N.
    Without the guard the shell died mid-call and the rank returned to address 0 (SIGSEGV)."""
    rank = gil_rank("thread")
    p = subprocess.Popen([PY, "-c", _HOLD_CALL, str(rank.pid)], cwd=ROOT, text=True, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, preexec_fn=default_dispositions)  # fmt: skip
    assert p.stdout is not None and p.stdout.readline() == "calling\n"
    p.send_signal(getattr(signal, sig))
    out, err = p.communicate(timeout=60)
    assert p.returncode == 128 + getattr(signal, sig) and out == "released\n", err
    assert _tracer(rank.pid) == "0"
    rank.finish()  # the loop went on, its arithmetic right


def test_code_that_had_started_when_the_shell_gave_up_undoes_itself(gil_rank, tmp_path):
    """The protocol's last step, in a real rank: its code took the request, then the shell gave up (here:
    stopped, as a signal stops it) before the answer came. The shell marks the answer's name (a directory),
    so the rank's answer cannot land, and the rank runs the code's ``undo``; the marker stays until that
    rank could no longer answer."""
    rank = gil_rank("thread")
    reg, started, go, undone = (tmp_path / n for n in ("reg", "started", "go", "undone"))
    reg.mkdir(mode=0o700)
    body = f"import os, time\nopen({str(started)!r}, 'w').close()\n"
    body += f"while not os.path.exists({str(go)!r}):\n    time.sleep(0.01)\nresult = {{'status': 'adopted'}}\n"
    body += f"undo = lambda: open({str(undone)!r}, 'w').close()\n"
    guard = sigdefer.Guard()

    def stop_once_started() -> None:
        _wait(started.exists, why="the code never started")
        guard.signum = signal.SIGINT
        guard.stop.set()

    threading.Thread(target=stop_once_started, daemon=True).start()
    with pytest.raises(sigdefer.Interrupted) as stopped:
        inject.run_all([rank.pid], {rank.pid: body}, "ptrace", reg, guard=guard)
    why = "interrupted; its code had started and undoes itself when done"
    assert stopped.value.answers == {rank.pid: {"status": "error", "error": why, "taken": True}}
    go.touch()
    _wait(undone.exists, why="the code never undid itself")
    (box,) = os.listdir(reg)
    assert os.listdir(reg / box) == [f"{rank.pid}.json"] and (reg / box / f"{rank.pid}.json").is_dir()
    rank.finish()


def test_boxes_of_shells_that_are_gone_are_swept_once_old(tmp_path):
    from rtdebug.inject import exchange as injectdir

    gone = subprocess.Popen([PY, "-c", "pass"], preexec_fn=default_dispositions)
    gone.wait()
    reg = tmp_path / "reg"
    reg.mkdir(mode=0o700)
    old, young = reg / f".inject-{gone.pid}-0001", reg / f".inject-{gone.pid}-0002"
    for box in (old, young):
        (box / "123.json").mkdir(parents=True)
    os.utime(old, (time.time() - 2 * injectdir.SWEEP_AFTER_S,) * 2)
    with injectdir.Box(reg) as box:
        assert sorted(os.listdir(reg)) == sorted([young.name, box.name])
    assert os.listdir(reg) == [young.name]
