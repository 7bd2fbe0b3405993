"""``rtdebug stacks --native``: native (C/C++) frames of each rank through py-spy (needs ptrace rights)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from rtdebug.common.errors import HarnessError


def find_py_spy() -> str | None:
    here = Path(sys.executable).with_name("py-spy")
    return str(here) if here.is_file() and os.access(here, os.X_OK) else shutil.which("py-spy")


def py_spy_dump(exe: str, pid: int, timeout: float, native: bool = False) -> list[dict[str, Any]] | str:
    """py-spy's ``dump --json`` of one process (read-only; ``native`` adds C/C++ frames): its threads, or
    why not, in one line. Shared by ``--native`` and ``rtdebug stacks --pid``."""
    cmd = [exe, "dump", *(["--native"] if native else []), "--json", "--pid", str(pid)]
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return "py-spy timed out"
    if out.returncode != 0:
        return "py-spy could not attach: " + (out.stderr.strip().splitlines() or ["?"])[0]
    try:
        threads = json.loads(out.stdout)
    except ValueError:
        return "py-spy printed no JSON"
    return threads if isinstance(threads, list) else "py-spy printed no thread list"


def native_dumps(pids: dict[int, int], timeout: float) -> dict[int, Any]:
    """py-spy's ``dump --native`` of each rank (threads with Python and native frames), in parallel."""
    exe = find_py_spy()
    if exe is None:
        raise HarnessError("--native needs py-spy: pip install 'rtdebug[stacks]' (or pip install py-spy)")

    def one(pid: int) -> Any:
        threads = py_spy_dump(exe, pid, max(timeout * 10, 30.0), native=True)  # symbolizing libtorch: seconds
        if isinstance(threads, str):
            return threads
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
