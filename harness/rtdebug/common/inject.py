"""Run a small piece of Python in running processes, each with the GIL held: ``rtdebug adopt`` and its detach.

How the GIL is taken (``ptrace`` and ``gdb``, Python 3.10-3.13): the process's main thread is stopped
wherever it is, its other threads keep running (gdb's ``scheduler-locking off``), and it is made to call
``PyGILState_Check()``, which says whether this thread holds the GIL:

- it does not, and it was blocked in a system call (a C++ collective, ``time.sleep``, I/O, waiting for
  the GIL; not half-way through C code that might hold a lock the code needs, e.g. malloc's): it calls
  ``PyGILState_Ensure()``, which takes the GIL back for the thread's own state (``PyEval_RestoreThread``;
  if another thread holds it, that thread runs on and lets go at its next switch), then
  ``PyRun_SimpleString(code)`` and ``PyGILState_Release()``; the code has run when the call returns;
- it does (it runs Python, or C code), or it runs C code without the GIL: running Python there could
  break the interpreter (an exception being raised, an allocation half done: seen on 3.13 as a
  ``SystemError``), so ``Py_AddPendingCall(PyRun_SimpleString, code)`` queues it instead, with the code in
  a page of its own, and the interpreter runs it between two bytecodes, at once in a busy rank, or as
  soon as the thread is back in Python.

Either way the thread's registers are then put back and the system call it was in, if any, is restarted
by the kernel as after a signal. The code writes its own answer file; ``run_all`` waits for it.

Methods (``choose``): ``ptrace`` (``rtdebug.common.ptrace``, x86_64: needs no debugger and works where
gdb 13 cannot restore a thread's registers, see there); ``gdb`` elsewhere, as ``debugpy --pid`` does it;
``sys.remote_exec`` (3.14) when neither can run: it needs no debugger but runs the code only when the
main thread next runs Python, so it cannot adopt a rank blocked in C++. ``RTDEBUG_INJECT`` forces one.
"""

from __future__ import annotations

import errno
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from rtdebug.common import elfsyms, ptrace
from rtdebug.common.errors import HarnessError

API = ("Py_IsInitialized", "PyGILState_Ensure", "PyRun_SimpleString", "PyGILState_Release", "PyGILState_Check",
       "Py_AddPendingCall")  # fmt: skip
PAGE = 4096
MAX_CODE = 1 << 16
MIN_PYTHON = (3, 10)
ANSWER_S = 10.0  # how long a rank's code may take to answer (a queued one runs when its main thread runs Python)
CAP_SYS_PTRACE = 19
NOT_TRACEABLE = (
    "tracing it needs CAP_SYS_PTRACE, which this process lacks (the target is not dumpable, or a container "
    "or seccomp policy forbids ptrace: docker run --cap-add SYS_PTRACE)"
)
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


def traced_or_stopped(pid: int) -> str | None:
    """A process that a debugger traces cannot be traced twice; a stopped one would be resumed by the call."""
    fields = dict(line.split(":", 1) for line in Path(f"/proc/{pid}/status").read_text().splitlines() if ":" in line)
    tracer = fields.get("TracerPid", "0").strip()
    if tracer not in ("", "0"):
        return f"pid {pid} is traced by pid {tracer} already (a debugger or py-spy?); detach it first"
    if fields.get("State", "").strip()[:1] in ("T", "t"):
        return f"pid {pid} is stopped (SIGSTOP or a debugger); continue it first (kill -CONT {pid})"
    return None


def refusal(pid: int, method: str) -> str | None:
    """Why code cannot be injected into ``pid`` with ``method``, in one line (checked before any rank is
    touched, so that a refusal leaves nothing half-done), or None."""
    uid = os.stat(f"/proc/{pid}").st_uid
    if uid != os.geteuid():
        return f"pid {pid} belongs to uid {uid}, not to you (uid {os.geteuid()})"
    if method == "gdb" and shutil.which("gdb") is None:
        return "gdb is not installed (Debian/Ubuntu: apt-get install gdb)"
    why = traced_or_stopped(pid) or ptrace_denied(pid)
    if why is not None:
        return why
    try:
        version = python_version(pid)
    except PermissionError:  # /proc/<pid>/maps needs ptrace access
        return f"cannot read pid {pid}'s memory map: {NOT_TRACEABLE}"
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


def _via_ptrace(pid: int, code: str) -> bool:
    """Run ``code`` in ``pid``; True if it was queued as a pending call (it runs when the main thread next
    runs Python), False if it ran before this returned."""
    addr = elfsyms.resolve(pid, set(API))
    data = code.encode() + b"\0"
    if len(data) > MAX_CODE:
        raise HarnessError(f"pid {pid}: the code to inject is too long ({len(data)} bytes)")
    t = ptrace.Tracee(pid)
    try:
        if ptrace.as_int(t.call(addr["Py_IsInitialized"])) == 0:
            raise HarnessError(f"pid {pid}: its Python is not initialized (yet)")
        if ptrace.as_int(t.call(addr["PyGILState_Check"])) == 1 or not t.blocked_in_syscall:
            return _pending(t, addr, data)
        # Blocked in a system call with the GIL released (a C++ collective, sleep, I/O): take it and run.
        state = t.call(addr["PyGILState_Ensure"])
        where = t.stack_below(len(data))
        t.write(where, data)
        t.call(addr["PyRun_SimpleString"], where, below=where)
        t.call(addr["PyGILState_Release"], ptrace.as_int(state))
        return False
    finally:
        t.release()


def _pending(t: ptrace.Tracee, addr: dict[str, int], data: bytes) -> bool:
    """The thread holds the GIL, so it may be anywhere in the interpreter (mid-allocation, an exception
    being raised): running Python nested there could corrupt it. Queue ``PyRun_SimpleString(code)`` as a
    pending call instead (``Py_AddPendingCall``: the interpreter runs it between two bytecodes), with the
    code in a page of its own (``mmap``, a bare system call wrapper, is safe to call from anywhere)."""
    mmap = elfsyms.resolve_libc(t.pid, "mmap")
    if mmap is None:
        raise HarnessError(f"pid {t.pid}: no mmap in its C library")
    size = -(-len(data) // PAGE) * PAGE  # left mapped: it must outlive this call (a page or so per injection)
    page = t.call(mmap, 0, size, 3, 0x22, -1, 0)  # PROT_READ|WRITE, MAP_PRIVATE|ANONYMOUS
    if page >= 1 << 63:
        raise HarnessError(f"pid {t.pid}: mmap failed in it (errno {-(page - (1 << 64))})")
    t.write(page, data)
    if ptrace.as_int(t.call(addr["Py_AddPendingCall"], addr["PyRun_SimpleString"], page)) != 0:
        raise HarnessError(f"pid {t.pid}: its pending-call queue is full; try again")
    return True


def gdb_script(code: str) -> str:
    """The gdb commands (see the module docstring): queued as a pending call when the thread holds the GIL,
    run under ``PyGILState_Ensure`` when it has released it. gdb copies each string literal into the
    process (with its ``malloc``), where a queued one stays until it has run."""
    c = c_string(code)
    return (
        "set $init = (int)Py_IsInitialized()\nif $init\n  if (int)PyGILState_Check()\n"
        f"    set $r = (int)Py_AddPendingCall((void*)PyRun_SimpleString, {c})\n"
        '    printf "RTDEBUG_QUEUED %d\\n", $r\n  else\n    set $g = (int)PyGILState_Ensure()\n'
        f"    set $r = (int)PyRun_SimpleString({c})\n    call (void)PyGILState_Release($g)\n"
        '    printf "RTDEBUG_RESULT %d\\n", $r\n  end\nelse\n  printf "RTDEBUG_NOT_INITIALIZED\\n"\nend\n'
    )


def _via_gdb(pid: int, code: str) -> bool:
    """Untested on this project's machines: their gdb 13 cannot restore registers there (``ptrace`` module)."""
    with tempfile.NamedTemporaryFile("w", suffix=".gdb", delete=False) as f:
        f.write(gdb_script(code))
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONIOENCODING")}
    opts = ["-iex", "set debuginfod enabled off", "-ex", "set scheduler-locking off"]
    try:
        out = subprocess.run(
            ["gdb", "-nx", "-nh", "--batch", *opts, "-p", str(pid), "-x", f.name],
            capture_output=True, text=True, env=env, timeout=120,
        )  # fmt: skip
    finally:
        os.unlink(f.name)
    if "RTDEBUG_QUEUED 0" in out.stdout:
        return True
    if "RTDEBUG_RESULT" not in out.stdout:
        last = (out.stderr.strip().splitlines() or ["no output"])[-1]
        raise HarnessError(f"pid {pid}: gdb could not run code in it: {last}")
    return False


def _via_remote_exec(pid: int, code: str) -> bool:
    with tempfile.NamedTemporaryFile("w", suffix=".py", delete=False) as f:
        f.write(code)
    os.chmod(f.name, 0o600)
    sys.remote_exec(pid, f.name)  # type: ignore[attr-defined]  # 3.14+; the file is read at the next eval break
    return True


def run(pid: int, code: str, method: str) -> bool:
    """Run ``code`` in ``pid``'s main thread with the GIL held (see the module docstring); True if it was
    queued and runs when that thread next runs Python (the caller waits for the code's own answer)."""
    try:
        return {"ptrace": _via_ptrace, "gdb": _via_gdb, "remote_exec": _via_remote_exec}[method](pid, code)
    except ptrace.PtraceError as exc:
        if exc.errno not in (errno.EPERM, errno.EACCES):
            raise HarnessError(str(exc.strerror)) from None  # e.g. the process ended meanwhile
        why = ptrace_denied(pid) or NOT_TRACEABLE
        raise HarnessError(f"ptrace of pid {pid} was refused ({os.strerror(exc.errno)}): {why}") from None


def run_all(
    pids: list[int], code_for: dict[int, str], method: str, answer_for: dict[int, Path], timeout: float = ANSWER_S
) -> dict[int, dict[str, Any]]:
    """``run`` in every pid at once, then wait (up to ``timeout``) for each one's code to write its answer
    (a JSON object) to ``answer_for[pid]``. An injection that failed answers ``{"status": "error", ...}``."""

    def one(pid: int) -> str | None:
        try:
            run(pid, code_for[pid], method)
        except (HarnessError, OSError) as exc:
            return str(exc)
        return None

    with ThreadPoolExecutor(max_workers=max(1, min(16, len(pids)))) as ex:
        errors = dict(zip(pids, ex.map(one, pids), strict=True))
    answers: dict[int, dict[str, Any]] = {p: {"status": "error", "error": e} for p, e in errors.items() if e}
    deadline = time.monotonic() + timeout
    while True:
        for pid in pids:
            if pid not in answers and answer_for[pid].exists():
                try:
                    answers[pid] = json.loads(answer_for[pid].read_text())
                except (OSError, ValueError):
                    pass
        if len(answers) == len(pids) or time.monotonic() > deadline:
            break
        time.sleep(0.01)
    why = f"no answer within {timeout:g} s (its main thread has not run Python since)"
    return {p: answers.get(p, {"status": "error", "error": why}) for p in pids}


# Undo ``rtdebug adopt`` in a rank (``rtdebug.rank.adopted.detach``); a rank never adopted is left alone.
_DETACH = "import sys\nm = sys.modules.get('rtdebug.rank.adopted')\nif m is not None:\n m.detach({result!r})\n"


def wrap(code: str) -> str:
    """``code`` run by ``exec`` in a fresh namespace: the process's ``__main__`` gets no new names."""
    return f"exec({code!r}, {{}})"


def method_for(pid: int) -> str:
    """How this machine enters ``pid``'s Python: ptrace, gdb or sys.remote_exec (see ``choose``)."""
    import platform

    python = python_version(pid)
    return choose(python, platform.machine(), shutil.which("gdb") is not None, hasattr(sys, "remote_exec"))


def detach_pids(pids: list[int], method: str) -> dict[int, dict[str, Any]]:
    """Detach the adopted ranks ``pids`` (endpoint shut, dump disarmed, debugger stopped); the stop path of
    an adopted session calls this instead of ending its processes. {pid: its answer; status "detached",
    "not adopted" or "error"}."""
    tmp = Path(tempfile.mkdtemp(prefix="rtdebug-detach-"))
    try:
        answer_for = {p: tmp / f"{p}.json" for p in pids}
        return run_all(pids, {p: wrap(_DETACH.format(result=str(answer_for[p]))) for p in pids}, method, answer_for)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
