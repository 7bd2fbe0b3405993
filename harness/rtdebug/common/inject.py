"""Run a small piece of Python in running processes, each with the GIL held: ``rtdebug adopt`` and its detach.

How the GIL is taken (``ptrace`` and ``gdb``, Python 3.10-3.13): the process's main thread is stopped
wherever it is and made to call ``PyGILState_Ensure()``, ``PyRun_SimpleString(code)`` and
``PyGILState_Release()``, while its other threads keep running (gdb's ``scheduler-locking off``). A main
thread blocked in a C++ collective or in ``time.sleep`` has released the GIL, so ``PyGILState_Ensure``
takes it back for its own thread state (``PyEval_RestoreThread``); one that runs Python holds it already
and the code runs nested, as debugpy's ``--pid`` injector does; one waiting for it waits until the holder
(another thread, still running) lets go. After the calls the thread's registers are put back and the
system call it was in, if any, is restarted by the kernel as after a signal.

Methods (``choose``): ``ptrace`` (``rtdebug.common.ptrace``, x86_64: needs no debugger and works where
gdb 13 cannot restore a thread's registers, see there); ``gdb`` elsewhere, as ``debugpy --pid`` does it;
``sys.remote_exec`` (3.14) when neither can run: it needs no debugger but runs the code only when the
main thread next runs Python, so it cannot adopt a rank blocked in C++. ``RTDEBUG_INJECT`` forces one.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from rtdebug.common import elfsyms, ptrace
from rtdebug.common.errors import HarnessError

API = ("Py_IsInitialized", "PyGILState_Ensure", "PyRun_SimpleString", "PyGILState_Release")
MIN_PYTHON = (3, 10)
CAP_SYS_PTRACE = 19
YAMA = Path("/proc/sys/kernel/yama/ptrace_scope")


def python_version(pid: int) -> tuple[int, int] | None:
    """The (major, minor) of the Python ``pid`` runs, from its libpython or executable name."""
    image = elfsyms.python_image(pid)
    m = re.search(r"python(\d)\.(\d+)", image or "")
    return (int(m.group(1)), int(m.group(2))) if m else None


def choose(target: tuple[int, int] | None, machine: str, has_gdb: bool, ours_has_remote_exec: bool) -> str:
    """The injection method for a target Python ``target`` (see the module docstring)."""
    forced = os.environ.get("RTDEBUG_INJECT", "")
    if forced in ("ptrace", "gdb", "remote_exec"):
        return forced
    if machine in ("x86_64", "AMD64"):
        return "ptrace"
    if has_gdb or target is None or target < (3, 14) or not ours_has_remote_exec:
        return "gdb"
    return "remote_exec"


def _cap_sys_ptrace() -> bool:
    with open("/proc/self/status") as f:
        caps = next((line.split()[1] for line in f if line.startswith("CapEff:")), "0")
    return bool(int(caps, 16) >> CAP_SYS_PTRACE & 1)


def ptrace_denied(pid: int, scope: int | None = None, cap: bool | None = None) -> str | None:
    """Why this process may not ptrace ``pid`` (the setting named), or None."""
    if scope is None:
        try:
            scope = int(YAMA.read_text())
        except (OSError, ValueError):
            scope = 0
    cap = _cap_sys_ptrace() if cap is None else cap
    fix = "sudo sysctl kernel.yama.ptrace_scope=0, or run with CAP_SYS_PTRACE"
    if scope >= 3:
        return "ptrace is disabled on this machine (kernel.yama.ptrace_scope = 3; only a reboot lowers it)"
    if scope == 2 and not cap:
        return f"kernel.yama.ptrace_scope = 2 allows ptrace only with CAP_SYS_PTRACE ({fix})"
    if scope == 1 and not cap:
        return f"kernel.yama.ptrace_scope = 1 lets you ptrace only your own children (pid {pid} is not; {fix})"
    return None


def refusal(pid: int, method: str) -> str | None:
    """Why code cannot be injected into ``pid`` with ``method``, in one line (checked before any rank is
    touched, so that a refusal leaves nothing half-done), or None."""
    uid = os.stat(f"/proc/{pid}").st_uid
    if uid != os.geteuid():
        return f"pid {pid} belongs to uid {uid}, not to you (uid {os.geteuid()})"
    if method == "gdb" and shutil.which("gdb") is None:
        return "gdb is not installed (Debian/Ubuntu: apt-get install gdb)"
    why = ptrace_denied(pid)
    if why is not None:
        return why
    version = python_version(pid)
    if version is not None and version < MIN_PYTHON:
        return f"pid {pid} runs Python {version[0]}.{version[1]}; adopting needs Python 3.10 or newer"
    if method in ("ptrace", "gdb"):
        missing = sorted(set(API) - set(elfsyms.resolve(pid, set(API))))
        if missing:
            image = elfsyms.python_image(pid) or "its executable"
            return f"pid {pid}'s Python ({image}) exports no {', '.join(missing)} (a Python without symbols?)"
    return None


def c_string(text: str) -> str:
    """``text`` as a C string literal (gdb's ``call``)."""
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'


def _via_ptrace(pid: int, code: str) -> None:
    addr = elfsyms.resolve(pid, set(API))
    t = ptrace.Tracee(pid)
    try:
        if t.call(addr["Py_IsInitialized"]) == 0:
            raise HarnessError(f"pid {pid}: its Python is not initialized (yet)")
        state = t.call(addr["PyGILState_Ensure"])
        data = code.encode() + b"\0"
        where = t.stack_below(len(data))
        t.write(where, data)
        t.call(addr["PyRun_SimpleString"], where, below=where)
        t.call(addr["PyGILState_Release"], state & 0xFFFFFFFF)
    finally:
        t.release()


def _via_gdb(pid: int, code: str) -> None:
    script = (
        "set $init = (int)Py_IsInitialized()\nif $init\n  set $g = (int)PyGILState_Ensure()\n"
        f"  set $r = (int)PyRun_SimpleString({c_string(code)})\n  call (void)PyGILState_Release($g)\n"
        '  printf "RTDEBUG_RESULT %d\\n", $r\nelse\n  printf "RTDEBUG_NOT_INITIALIZED\\n"\nend\n'
    )
    with tempfile.NamedTemporaryFile("w", suffix=".gdb", delete=False) as f:
        f.write(script)
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONIOENCODING")}
    opts = ["-iex", "set debuginfod enabled off", "-ex", "set scheduler-locking off"]
    try:
        out = subprocess.run(
            ["gdb", "-nx", "-nh", "--batch", *opts, "-p", str(pid), "-x", f.name],
            capture_output=True, text=True, env=env, timeout=120,
        )  # fmt: skip
    finally:
        os.unlink(f.name)
    if "RTDEBUG_RESULT" not in out.stdout:
        last = (out.stderr.strip().splitlines() or ["no output"])[-1]
        raise HarnessError(f"pid {pid}: gdb could not run code in it: {last}")


def _via_remote_exec(pid: int, code: str) -> None:
    with tempfile.NamedTemporaryFile("w", suffix=".py", delete=False) as f:
        f.write(code)
    os.chmod(f.name, 0o600)
    sys.remote_exec(pid, f.name)  # type: ignore[attr-defined]  # 3.14+; the file is read at the next eval break


def run(pid: int, code: str, method: str) -> None:
    """Run ``code`` in ``pid``'s main thread with the GIL held (see the module docstring)."""
    try:
        {"ptrace": _via_ptrace, "gdb": _via_gdb, "remote_exec": _via_remote_exec}[method](pid, code)
    except ptrace.PtraceError as exc:
        why = ptrace_denied(pid) or "in a container add CAP_SYS_PTRACE (docker run --cap-add SYS_PTRACE)"
        raise HarnessError(f"ptrace of pid {pid} failed ({exc.strerror}): {why}") from None


def run_all(pids: list[int], code_for: dict[int, str], method: str) -> dict[int, str | None]:
    """``run`` in every pid at once; {pid: None if it ran, else the one-line error}."""

    def one(pid: int) -> str | None:
        try:
            run(pid, code_for[pid], method)
        except (HarnessError, OSError) as exc:
            return str(exc)
        return None

    with ThreadPoolExecutor(max_workers=max(1, min(16, len(pids)))) as ex:
        return dict(zip(pids, ex.map(one, pids), strict=True))


# Undo ``rtdebug adopt`` in a rank (``rtdebug.rank.adopted.detach``); a rank never adopted is left alone.
_DETACH = "import sys\nm = sys.modules.get('rtdebug.rank.adopted')\nif m is not None:\n m.detach({result!r})\n"


def wrap(code: str) -> str:
    """``code`` run by ``exec`` in a fresh namespace: the process's ``__main__`` gets no new names."""
    return f"exec({code!r}, {{}})"


def detach_pids(pids: list[int], method: str) -> dict[int, str | None]:
    """Detach the adopted ranks ``pids`` (endpoint shut, dump disarmed, debugger stopped); the stop path of
    an adopted session calls this instead of ending its processes. {pid: None, or why it failed}."""
    tmp = tempfile.mkdtemp(prefix="rtdebug-detach-")
    try:
        return run_all(pids, {p: wrap(_DETACH.format(result=f"{tmp}/{p}.json")) for p in pids}, method)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
