"""Run a small piece of Python in running processes and collect each one's answer: ``rtdebug adopt``, its
detach, and the Ray worker probe.

How the code gets in (``choose``): ``ptrace`` (``rtdebug.inject.ptrace_call``, x86_64: needs no debugger
and works where gdb 13 cannot restore a thread's registers), ``gdb`` elsewhere, as ``debugpy --pid`` does
it, ``sys.remote_exec`` (3.14) when neither can run (``rtdebug.inject.gdb``). ``RTDEBUG_INJECT``
forces one.

Every wait is bounded, and none holds a thread of the job: the code is queued as a pending call, or (ptrace,
a rank waiting in a system call without the GIL) run by a thread of the rank's own; a held thread only
ever makes short calls that never wait on the GIL. The shell then waits for the answer (up to
``answer_s()``), watching each process: one that ends is said in one line at once. On time out, a signal,
or a rank's death, it gives up on what has not answered through ``rtdebug.inject.exchange``: code that has
not started yet will find its request gone and do nothing; code that has started undoes its work when it
ends. Requests and answers live in a private 0700 directory in the owner's registry, never in ``/tmp``.
SIGINT, SIGHUP and SIGTERM are held back for the whole run (``rtdebug.inject.sigdefer``): each held thread
is put back and detached first, then ``Interrupted`` is raised with the answers so far.
"""

from __future__ import annotations

import errno
import os
import re
import shutil
import signal
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from rtdebug.common.errors import HarnessError
from rtdebug.common.procinfo import is_alive, process_create_time
from rtdebug.inject import elfsyms, ptrace, sigdefer
from rtdebug.inject import gdb as inject_gdb
from rtdebug.inject import ptrace_call as inject_ptrace
from rtdebug.inject.exchange import Box

MIN_PYTHON = (3, 10)
ANSWER_ENV = "RTDEBUG_INJECT_ANSWER_S"
ANSWER_S = 10.0  # how long a process's code may take to answer (a queued one runs when its main thread runs Python)
NOTE_S = 1.0  # then one line says who is being waited for
CAP_SYS_PTRACE = 19
NOT_TRACEABLE = (
    "tracing it needs CAP_SYS_PTRACE, which this process lacks (the target is not dumpable, or a container "
    "or seccomp policy forbids ptrace: docker run --cap-add SYS_PTRACE)"
)
YAMA = Path("/proc/sys/kernel/yama/ptrace_scope")


def answer_s() -> float:
    try:
        return max(0.1, float(os.environ.get(ANSWER_ENV, ANSWER_S)))
    except ValueError:
        return ANSWER_S


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
    try:
        return _refusal(pid, method)
    except (FileNotFoundError, ProcessLookupError):
        return f"pid {pid} has ended"


def _refusal(pid: int, method: str) -> str | None:
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
        needed = set(inject_ptrace.C_API)
        missing = (
            inject_ptrace.missing(pid) if method == "ptrace" else sorted(needed - set(elfsyms.resolve(pid, needed)))
        )
        if missing:
            image = elfsyms.python_image(pid) or "its executable"
            return f"pid {pid}'s Python ({image}) exports no {', '.join(missing)} (a Python without symbols?)"
    return None


def run(pid: int, code: str, method: str, guard: sigdefer.Guard, box: Box) -> None:
    """Have ``pid`` run ``code`` (see the module docstring); it answers through ``box``."""
    try:
        if method == "ptrace":
            inject_ptrace.inject(pid, code, guard)
        elif method == "gdb":
            inject_gdb.via_gdb(pid, code, box)
        else:
            inject_gdb.via_remote_exec(pid, code, box)
    except ptrace.PtraceError as exc:
        if exc.errno not in (errno.EPERM, errno.EACCES):
            raise HarnessError(str(exc.strerror)) from None  # e.g. the process ended meanwhile
        why = ptrace_denied(pid) or NOT_TRACEABLE
        raise HarnessError(f"ptrace of pid {pid} was refused ({os.strerror(exc.errno)}): {why}") from None
    except (FileNotFoundError, ProcessLookupError):
        raise HarnessError(f"pid {pid} has ended") from None


def run_all(pids: list[int], body_for: dict[int, str], method: str, where: Path, unasked: bool = False,
            guard: sigdefer.Guard | None = None) -> dict[int, dict[str, Any]]:  # fmt: skip
    """Run each pid's ``body`` (Python that sets ``result``, a JSON object, and may set ``undo``) in it, all
    at once; {pid: its result}, or {"status": "error", "error": why} for one that failed, ended or did not
    answer in time. ``where``: the owner's checked registry root (for the private directory). ``unasked``:
    code that runs late still runs (a detach), answering no one. A held-back signal (``sigdefer``) stops
    the run and raises ``Interrupted`` with the answers; ``guard`` replaces the active one (an undo that
    must run to its end while the shell is already interrupted)."""
    try:
        box = Box(where)
    except OSError as exc:
        raise HarnessError(f"cannot make rtdebug's private directory in {where}: {exc}") from None
    with sigdefer.deferred() as active, box:
        guard = guard or active
        born = {p: process_create_time(p) for p in pids}
        answers: dict[int, dict[str, Any]] = {}
        for pid in pids:
            box.request(pid)

        def one(pid: int) -> None:
            try:
                if guard.stop.is_set():
                    raise sigdefer.Interrupted(guard.signum or signal.SIGINT)
                run(pid, box.code(pid, body_for[pid], unasked), method, guard, box)
            except (HarnessError, OSError) as exc:  # if its code got in all the same, it does nothing
                how, answer = box.give_up(pid)
                answers[pid] = answer if how == "answered" and answer else _failed(str(exc), how)

        with ThreadPoolExecutor(max_workers=max(1, min(16, len(pids)))) as ex:
            list(ex.map(one, pids))
        _wait(box, pids, born, answers, guard)
        if guard.stop.is_set():
            raise sigdefer.Interrupted(guard.signum or signal.SIGINT, answers)
        return answers


def _wait(box: Box, pids: list[int], born: dict[int, float | None], answers: dict[int, Any], guard: Any) -> None:
    """Collect answers until all are in, the time is up, or the guard stops it; then give up on the rest."""
    start, noted, limit = time.monotonic(), False, answer_s()
    while (waiting := [p for p in pids if p not in answers]) and not guard.stop.is_set():
        for pid in waiting:
            if (a := box.answer(pid)) is not None:
                answers[pid] = a
            elif born[pid] is None or not is_alive(pid, born[pid] or 0.0):
                answers[pid] = {"status": "error", "error": f"pid {pid} has ended"}
        waited = time.monotonic() - start
        if waited > limit:
            break
        if waited > NOTE_S and not noted and len(answers) < len(pids):
            noted = _note([p for p in pids if p not in answers])
        guard.stop.wait(0.01)
    for pid in [p for p in pids if p not in answers]:
        how, answer = box.give_up(pid)
        why = "interrupted" if guard.stop.is_set() else f"no answer within {limit:g} s"
        if how == "answered" and answer is not None:
            answers[pid] = answer
        elif how == "taken":
            answers[pid] = _failed(why, how)
        else:
            since = "" if guard.stop.is_set() else " (its main thread has not run Python since)"
            answers[pid] = _failed(f"{why}{since}; nothing ran there", how)


def _failed(why: str, how: str) -> dict[str, Any]:
    """The answer for a process given up on (``Box.give_up``'s ``how``): whether its code had started."""
    if how == "taken":
        return {"status": "error", "error": f"{why}; its code had started and undoes itself when done", "taken": True}
    return {"status": "error", "error": why}


def _note(pids: list[int]) -> bool:
    more = f" (and {len(pids) - 1} more)" if len(pids) > 1 else ""
    line = (f"rtdebug: waiting for pid {pids[0]}{more}: it has not run Python since (a C call holds its GIL?); "
            f"giving up after {answer_s():g} s, Ctrl-C leaves it as it was")  # fmt: skip
    try:
        print(line, file=sys.stderr, flush=True)
    except OSError:  # the terminal is gone
        pass
    return True


# Undo ``rtdebug adopt`` in a process (``rtdebug.rank.adopted.detach``); one never adopted is left alone.
_DETACH = "import os, sys\nm = sys.modules.get('rtdebug.rank.adopted')\n"
_DETACH += "result = m.detach() if m is not None else {'status': 'not adopted', 'pid': os.getpid()}\n"


def method_for(pid: int) -> str:
    """How this machine enters ``pid``'s Python: ptrace, gdb or sys.remote_exec (see ``choose``)."""
    import platform

    try:
        python = python_version(pid)
    except OSError:  # ended, or its map unreadable: the refusal says which
        python = None
    return choose(python, platform.machine(), shutil.which("gdb") is not None, hasattr(sys, "remote_exec"))


def detach_pids(pids: list[int], method: str, where: Path, guard: sigdefer.Guard | None = None) -> dict[int, Any]:
    """Detach the adopted ranks ``pids`` (endpoint shut, dump disarmed, debugger stopped); the stop path of
    an adopted session calls this instead of ending its processes. {pid: its answer; status "detached",
    "not adopted" or "error"}. A detach that runs late still detaches (``unasked``)."""
    return run_all(pids, dict.fromkeys(pids, _DETACH), method, where, unasked=True, guard=guard)
