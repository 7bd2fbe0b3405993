"""``rtdebug stacks --pid PID``: the grouped stacks of every rank of a job rtdebug did not start or adopt.

Read-only: py-spy reads each rank's memory (``rtdebug[stacks]``; needs ptrace rights, no code is run in
the ranks). The ranks are found as ``rtdebug adopt`` finds them (``rtdebug.inject.jobs``); the answer is
grouped and printed exactly as ``rtdebug stacks`` does (``rtdebug.stacks.group`` / ``format``).
"""

from __future__ import annotations

import json
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from rtdebug.common.errors import HarnessError
from rtdebug.inject import jobs
from rtdebug.stacks import group as stackgroup
from rtdebug.stacks import text as stacktext
from rtdebug.stacks.native import find_py_spy, py_spy_dump


def _name(qualname: str) -> str:
    """py-spy gives ``co_qualname`` (3.11+; ``Outer.<locals>.wrapper``), faulthandler ``co_name``: the same."""
    return qualname.rpartition(".")[2] or qualname


def _dump(exe: str, pid: int, timeout: float) -> dict[str, Any] | str:
    """One rank through ``py-spy dump --json``: the group module's dump shape, or why not."""
    raw = py_spy_dump(exe, pid, max(timeout, 1.0) * 10)
    if isinstance(raw, str):
        return raw
    threads, main_id = [], None
    for t in raw:
        tid = hex(t.get("thread_id") or 0)
        if t.get("os_thread_id") == pid:
            main_id = tid
        frames = [stackgroup.frame(f.get("filename", "?"), f.get("line") or None, _name(f.get("name", "?")))
                  for f in t.get("frames", [])]  # fmt: skip
        threads.append({"id": tid, "current": False, "frames": frames, "truncated": False})
    return {"threads": threads, "main_id": main_id, "pid": pid, "complete": True}


def snapshot(pid: int, timeout: float) -> dict[str, Any]:
    """The ``rtdebug stacks --json`` object for the job of ``pid`` (agent or rank), through py-spy."""
    exe = find_py_spy()
    if exe is None:
        raise HarnessError("--pid needs py-spy: pip install 'rtdebug[stacks]' (or pip install py-spy)")
    job = jobs.find_job(pid)
    start, taken_at = time.monotonic(), time.time()
    with ThreadPoolExecutor(max_workers=min(8, len(job.ranks))) as ex:
        results = list(zip(job.ranks, ex.map(lambda r: _dump(exe, r.pid, timeout), job.ranks), strict=True))
    dumps = {r.rank: d for r, d in results if isinstance(d, dict)}
    bad = [(r, d) for r, d in results if isinstance(d, str)]
    return {
        "session_id": f"pid {job.agent_pid}",
        "taken_at": taken_at,
        "elapsed_s": round(time.monotonic() - start, 4),
        "groups": stackgroup.group(dumps),
        "unresponsive": sorted(r.rank for r, _ in bad),
        "unresponsive_detail": [{"rank": r.rank, "pid": r.pid, "reason": why} for r, why in bad],
        "exited": [],
        "incomplete": [],
    }


def show(pid: int, as_json: bool, threads: bool, timeout: float) -> int:
    """``rtdebug stacks --pid``'s answer (``StacksOptions`` has refused the options it cannot take)."""
    snap = snapshot(pid, timeout)
    print(json.dumps(snap, indent=1) if as_json else stacktext.render(snap, threads=threads))
    return 0
