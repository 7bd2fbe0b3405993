"""Stacks of every rank, without a debugger and without stopping anyone.

Rank side (``arm``): faulthandler is registered on ``SIGNAL`` to write all threads'
Python stacks to ``<registry>/<session>/stacks-<rank>.txt``. The dump is
C-level and async-signal-safe, so it works while the main thread is blocked
inside a C++ collective (GIL released) or suspended at a breakpoint, needs no
ptrace rights, and costs nothing until the signal comes.

Requester side (``collect``): under the session's stacks lock, truncate each
rank's file, send the signal, and poll until the main thread's block reaches its
recorded bottom frame (the dump is then whole) or ``timeout`` passes, which
makes the rank unresponsive -- never waited on beyond that.
"""

from __future__ import annotations

import faulthandler
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack
from pathlib import Path
from typing import Any

from harness import stackgroup
from harness.errors import HarnessError
from harness.filelocks import locked
from harness.registry import Registry

# A real-time signal, not SIGUSR1/2: schedulers and frameworks use those (SLURM's --signal, preemption
# checkpoint handlers), and the launcher's hang watch signals ranks periodically.
SIGNAL: int = int(signal.SIGRTMIN) + 6 if hasattr(signal, "SIGRTMIN") else int(signal.SIGUSR2)
_armed: dict[str, Any] = {}
STABLE_S = 0.3  # a dump that stops growing without reaching its bottom frame is taken as it is


def arm(session_dir: Path, rank: int) -> dict[str, Any] | None:
    """Register the dump in this process; returns the rank entry's ``stacks`` field (None if taken)."""
    if signal.getsignal(SIGNAL) not in (signal.SIG_DFL, None):
        return None  # the program (or an embedder) already owns the signal
    path = Path(session_dir) / f"stacks-{rank}.txt"
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_TRUNC, 0o600)
    except OSError:
        return None
    if _armed.get("fd") is not None:
        faulthandler.unregister(SIGNAL)
        os.close(_armed["fd"])
    faulthandler.register(SIGNAL, file=fd, all_threads=True, chain=False)
    f = sys._getframe()
    while f.f_back is not None:
        f = f.f_back
    _armed.update(fd=fd)
    return {
        "signal": int(SIGNAL),
        "file": path.name,
        "main_thread": hex(threading.main_thread().ident or 0),
        "bottom": [f.f_code.co_filename, f.f_code.co_name],
    }


def _stopped(pid: int) -> bool:
    import psutil  # the dumping side only: a rank imports this module to arm, at start

    try:
        return psutil.Process(pid).status() in (psutil.STATUS_STOPPED, psutil.STATUS_TRACING_STOP)
    except psutil.Error:
        return False


def _read(path: Path) -> str:
    try:
        return path.read_bytes().decode("utf-8", errors="replace")
    except OSError:
        return ""


def select_ranks(reg: Registry, session: dict[str, Any], ranks: frozenset[int] | None):
    """(live entries to dump, entries that have ended) among the selected ranks."""
    live: list[dict[str, Any]] = []
    ended: list[dict[str, Any]] = []
    for e in reg.ranks(session["session_id"]):
        if ranks is not None and e["rank"] not in ranks:
            continue
        (live if reg.live_rank(e) else ended).append(e)
    return live, ended


def collect(
    reg: Registry,
    session: dict[str, Any],
    ranks: frozenset[int] | None = None,
    timeout: float = 3.0,
    native: bool = False,
) -> dict[str, Any]:
    """A grouped snapshot of the selected live ranks of ``session`` (the ``--json`` object)."""
    sid = session["session_id"]
    sdir = reg.session_dir(sid)
    start, taken_at = time.monotonic(), time.time()  # when the signals went out
    live, ended = select_ranks(reg, session, ranks)
    dumps: dict[int, dict[str, Any]] = {}
    unresponsive: dict[int, str] = {}
    lock = ExitStack()
    try:
        lock.enter_context(locked(sdir / ".stacks.lock", timeout + 5))
    except OSError as exc:  # LockTimeout included
        raise HarnessError(f"cannot take the stacks lock of session {sid}: {exc}") from None
    with lock:
        pending: dict[int, dict[str, Any]] = {}
        for e in live:
            info = e.get("stacks")
            if not info:
                unresponsive[e["rank"]] = "stack dumps are not armed in this rank"
                continue
            if _stopped(e["pid"]):
                unresponsive[e["rank"]] = "process is stopped (SIGSTOP or a tracer)"
                continue
            path = sdir / info["file"]
            try:
                os.truncate(path, 0)
                os.kill(e["pid"], info["signal"])
            except OSError as exc:
                unresponsive[e["rank"]] = f"cannot signal pid {e['pid']}: {exc.strerror}"
                continue
            pending[e["rank"]] = dict(entry=e, info=info, path=path, text="", changed=time.monotonic())
        deadline = time.monotonic() + timeout
        while pending:
            now = time.monotonic()
            for rank, p in list(pending.items()):
                text = _read(p["path"])
                info = p["info"]
                if text != p["text"]:  # parse only what is new
                    p["text"], p["changed"] = text, now
                    p["done"] = stackgroup.dump_complete(text, info["main_thread"], info.get("bottom"))
                done = p.get("done", False)
                if done or (text and now - p["changed"] >= STABLE_S):
                    dumps[rank] = {
                        "threads": stackgroup.parse_dump(text),
                        "main_id": info["main_thread"],
                        "pid": p["entry"]["pid"],
                        "complete": done,
                    }
                    del pending[rank]
                elif now >= deadline:
                    unresponsive[rank] = f"no answer within {timeout:g} s"
                    del pending[rank]
            if pending:
                time.sleep(0.005)
    if native:
        for rank, result in native_dumps({r: d["pid"] for r, d in dumps.items()}, timeout).items():
            dumps[rank]["native"] = result
    pids = {e["rank"]: e["pid"] for e in live}
    return {
        "session_id": sid,
        "taken_at": taken_at,
        "elapsed_s": round(time.monotonic() - start, 4),
        "groups": stackgroup.group(dumps),
        "unresponsive": sorted(unresponsive),
        "unresponsive_detail": [
            {"rank": r, "pid": pids.get(r), "reason": unresponsive[r]} for r in sorted(unresponsive)
        ],
        "exited": [{"rank": e["rank"], "state": e["state"], "exit_code": e.get("exit_code")} for e in ended],
        "incomplete": sorted(r for r, d in dumps.items() if not d["complete"]),  # stopped short of the bottom
    }


def find_py_spy() -> str | None:
    here = Path(sys.executable).with_name("py-spy")
    return str(here) if here.is_file() and os.access(here, os.X_OK) else shutil.which("py-spy")


def native_dumps(pids: dict[int, int], timeout: float) -> dict[int, Any]:
    """py-spy's ``dump --native`` of each rank (threads with Python and native frames), in parallel."""
    exe = find_py_spy()
    if exe is None:
        raise HarnessError("--native needs py-spy: pip install 'rtdebug[stacks]' (or pip install py-spy)")

    def one(pid: int) -> Any:
        try:
            out = subprocess.run(
                [exe, "dump", "--native", "--json", "--pid", str(pid)],
                capture_output=True,
                text=True,
                timeout=max(timeout * 10, 30.0),  # symbolizing libtorch takes seconds
            )
        except subprocess.TimeoutExpired:
            return "py-spy timed out"
        if out.returncode != 0:
            return "py-spy could not attach: " + (out.stderr.strip().splitlines() or ["?"])[0]
        try:
            threads = json.loads(out.stdout)
        except ValueError:
            return "py-spy printed no JSON"
        return [
            {
                "id": hex(t.get("thread_id") or 0),
                "name": t.get("thread_name"),
                "main": t.get("os_thread_id") == pid,
                "frames": [
                    {"file": f.get("filename"), "line": f.get("line") or None, "function": f.get("name")}
                    for f in t.get("frames", [])
                ],
            }
            for t in threads
        ]

    with ThreadPoolExecutor(max_workers=min(8, max(len(pids), 1))) as ex:
        return dict(zip(pids, ex.map(one, pids.values()), strict=True))


def command(
    session_id: str | None, rank_spec: str | None, as_json: bool, native: bool, timeout: float, threads: bool
) -> int:
    """``rtdebug stacks``: print the grouped snapshot of one live session."""
    from harness import stackformat
    from harness.errors import usage
    from harness.ports import parse_rank_list

    if timeout <= 0:
        raise usage(f"--timeout must be > 0 seconds, got {timeout:g}")
    if native and find_py_spy() is None:
        raise HarnessError("--native needs py-spy: pip install 'rtdebug[stacks]' (or pip install py-spy)")
    reg = Registry()
    session = reg.find_session(session_id)
    world = max((int(r["world_size"]) for r in session["ranks"]), default=int(session["nproc_per_node"]))
    ranks = None
    if rank_spec is not None:
        try:
            ranks = parse_rank_list(rank_spec, world)  # None = all
        except HarnessError as exc:
            raise usage(exc.message.replace("--wait", "--rank")) from None
        if ranks == frozenset():
            raise usage(f"--rank {rank_spec} selects no rank")
    live, _ = select_ranks(reg, session, ranks)
    if not live:
        raise HarnessError(
            f"session {session['session_id']} has no running rank" + (f" among {rank_spec}" if rank_spec else "")
        )
    snap = collect(reg, session, ranks, timeout, native)
    if as_json:
        print(json.dumps(snap, indent=1))
    else:
        print(stackformat.render(snap, threads=threads, native=native))
    return 0
