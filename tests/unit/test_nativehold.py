"""All-stop's hold of a rank with no client (``rtdebug.rank.nativehold``), in a real child process: woken through
its FIFO when a peer stops, ``pausing`` while its main thread is in a native call, held the moment that call
returns, let go when the board says running; Ctrl-C while held still ends it."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from rtdebug.rank.allstop import RUNNING, STOPPED, Board

from support.paths import ROOT
from support.sigs import default_dispositions
from support.wait import until

CHILD = """
import json, os, sys
from rtdebug.rank import allstop

class Record:  # what RankState.set does, to a file the test reads
    def set(self, **fields):
        with open({entry!r} + ".tmp", "w") as f:
            json.dump(fields, f)
        os.replace({entry!r} + ".tmp", {entry!r})

class Endpoint:  # no client, ever
    clients = attach_count = 0
    on_dap = None
    def client_connected(self):
        return False

part = allstop.arm({sdir!r}, 0, Endpoint(), Record(), lambda *a: None)
assert part is not None and part.native is not None

def closer():  # an adopted rank's detach (rtdebug.rank.adopted), from a thread, when the test asks
    import threading, time
    while not os.path.exists({sdir!r} + ".close"):
        time.sleep(0.01)
    try:
        part.close(lambda *a: None)
        left = [t.name for t in threading.enumerate() if t.name.startswith("rtdebug")]
        left += [line for line in open("/proc/self/maps") if "allstop" in line]
        for fd in os.listdir("/proc/self/fd"):
            try:
                left += [p for p in [os.readlink("/proc/self/fd/" + fd)] if "allstop" in p]
            except OSError:  # the listing's own fd
                pass
    except BaseException as exc:  # said, never a test that waits for nothing
        left = [repr(exc)]
    print("closed", json.dumps(left), flush=True)

closing = __import__("threading").Thread(target=closer, daemon=True)
closing.start()
r, w = int(sys.argv[1]), int(sys.argv[2])
print("ready", flush=True)
try:
    os.read(r, 1)  # NATIVE: blocked in C until the test writes a byte
    after = 1  # AFTER
except KeyboardInterrupt:
    print("interrupted", flush=True)
    sys.exit(130)
print("went on", flush=True)
if os.path.exists({sdir!r} + ".close"):  # let go by the close: it says what it left before the rank ends
    closing.join(10)
"""


def _line(text: str, marker: str) -> int:
    return next(i for i, line in enumerate(text.splitlines(), 1) if marker in line)


def _pythons() -> list[str]:
    """This interpreter, and each other supported one: its venv (``scripts/pythons.sh``), else the newest pyenv
    build (the child needs the standard library only). ``Py_AddPendingCall``'s semantics moved in 3.12 and 3.13."""
    pyenv = Path(os.environ.get("PYENV_ROOT", Path.home() / ".pyenv")) / "versions"
    found = []
    for minor in sorted({10, 11, 12, 13} - {sys.version_info[1]}):
        venv = ROOT / f".venv-3.{minor}" / "bin" / "python"
        builds = [p for p in pyenv.glob(f"3.{minor}.*/bin/python") if p.parts[-3].split(".")[2].isdigit()]
        builds.sort(key=lambda p: int(p.parts[-3].split(".")[2]))  # 3.X.N only: no 3.13.0t, no 3.12-dev
        exe = venv if venv.exists() else (builds[-1] if builds else None)
        if exe is not None:
            found.append(str(exe))
    return [sys.executable, *found]


@pytest.fixture(params=_pythons(), ids=lambda p: Path(p).parent.parent.name.removeprefix(".venv-"))
def python(request) -> str:
    return request.param


def _start(tmp_path, python=sys.executable):
    sdir, entry = tmp_path / "s", tmp_path / "entry.json"
    sdir.mkdir(mode=0o700)
    code = CHILD.format(entry=str(entry), sdir=str(sdir))
    script = tmp_path / "rank.py"
    script.write_text(code)
    r, w = os.pipe()
    p = subprocess.Popen(
        [python, str(script), str(r), str(w)],
        pass_fds=(r, w),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=default_dispositions,
        env={
            **os.environ,
            "RTDEBUG_ALL_STOP": "1",
            "PYTHONPATH": str(ROOT / "harness"),
        },  # the suite's default is off (tests/conftest.py)
    )
    os.close(r)
    assert p.stdout is not None and p.stdout.readline() == "ready\n"
    until(lambda: _in_read(p.pid, r), 30, "the rank's main thread blocked in read()")
    return p, w, Board(sdir / "allstop.bin"), entry, code


def _in_read(pid: int, fd: int) -> bool:
    """Whether the process's main thread is blocked in ``read(fd)`` (the kernel's word: /proc/PID/syscall)."""
    read = {"x86_64": "0", "aarch64": "63"}[os.uname().machine]
    try:
        fields = open(f"/proc/{pid}/syscall").read().split()
    except OSError:
        return False
    return fields[:2] == [read, hex(fd)]


def _debug(entry):
    try:
        return json.loads(entry.read_text()).get("debug") or {}
    except (FileNotFoundError, json.JSONDecodeError):
        return {}


def _until(entry, state, **fields):
    return until(
        lambda: _debug(entry),
        30,
        f"the rank {state} {fields}",
        ok=lambda d: d.get("state") == state and all(d.get(k) == v for k, v in fields.items()),
    )


def test_a_rank_in_a_native_call_is_pausing_then_held_when_it_returns_and_goes_on_when_running(tmp_path, python):
    p, w, board, entry, code = _start(tmp_path, python)
    try:
        board.publish(STOPPED, 1)  # rank 1 stopped: this wakes rank 0's thread
        native = _line(code, "# NATIVE")
        d = _until(entry, "pausing", by=1, line=native)
        assert d["file"].endswith("rank.py")
        os.write(w, b"x")  # the native call returns: held at once, on that line, before the next one runs
        _until(entry, "paused", by=1, line=native, reason="all-stop")
        assert p.poll() is None
        board.publish(RUNNING, 1)
        out, err = p.communicate(timeout=30)
        assert p.returncode == 0, err
        assert "went on" in out
        assert f"rtdebug: rank 0 paused at rank.py:{native}: rank 1 stopped (all-stop); it goes on when rank 1" in err
        assert _debug(entry)["state"] == "running"
    finally:
        p.kill()
        p.wait()


def test_the_board_running_again_before_the_call_returns_lets_it_run_on(tmp_path, python):
    p, w, board, entry, _ = _start(tmp_path, python)
    try:
        board.publish(STOPPED, 1)
        _until(entry, "pausing", by=1)
        board.publish(RUNNING, 1)
        _until(entry, "running")
        os.write(w, b"x")
        out, err = p.communicate(timeout=30)
        assert p.returncode == 0 and "went on" in out and "paused" not in err
    finally:
        p.kill()
        p.wait()


def test_ctrl_c_while_held_ends_the_rank_where_it_was(tmp_path, python):
    p, w, board, entry, _ = _start(tmp_path, python)
    try:
        board.publish(STOPPED, 1)
        _until(entry, "pausing", by=1)
        os.write(w, b"x")
        _until(entry, "paused", by=1)
        p.send_signal(signal.SIGINT)
        out, _ = p.communicate(timeout=30)
        assert p.returncode == 130 and "interrupted" in out
    finally:
        p.kill()
        p.wait()


@pytest.mark.parametrize("held", [False, True], ids=["pausing", "paused"])
def test_close_lets_the_rank_go_and_leaves_nothing(tmp_path, held):
    """An adopted rank's detach (``AllStop.close``) while a peer is stopped and this rank is ``pausing`` (its hold
    queued) or ``paused`` (held): it runs on, never held again, and no thread, FIFO, fd or mmap of all-stop stays."""
    p, w, board, entry, _ = _start(tmp_path)
    try:
        board.publish(STOPPED, 1)
        _until(entry, "pausing", by=1)
        if held:
            os.write(w, b"x")
            _until(entry, "paused", by=1)
        (tmp_path / "s.close").touch()
        assert p.stdout is not None
        before = ""  # a held rank let go by the close may say "went on" before the closer says "closed"
        line = p.stdout.readline()
        while line and not line.startswith("closed "):
            before, line = before + line, p.stdout.readline()
        assert line.startswith("closed ") and json.loads(line.removeprefix("closed ")) == [], before + line
        assert not (tmp_path / "s" / "allstop-0.fifo").exists()
        if not held:
            os.write(w, b"x")  # the queued hold runs now: a no-op
        out, err = p.communicate(timeout=30)
        assert p.returncode == 0 and "went on" in before + out, err
        assert ("paused" in err) is held  # said once, when it was held; never after the close
        assert board.read()[1] == STOPPED  # a peer's stop is the peer's to end
    finally:
        p.kill()
        p.wait()
