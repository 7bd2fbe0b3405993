"""Section 5: Python 3.11 vs 3.12 and 3.13 (debugpy on ``sys.monitoring``), attached with no breakpoints.

3.11 is this venv's Python; 3.12 and 3.13 are the torch-free ``.venv-3.X`` that ``scripts/pythons.sh``
makes (the harness and its core dependencies, the same debugpy). torch has no CPU wheel for 3.12+ on this
machine, so this section uses the torch-free ``py`` loop in one process (report.TORCH_312_NOTE).
"""

from __future__ import annotations

import os
import platform
import shutil
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.suite.common import LOOP, METRICS, PY, ROOT, WORK, base_env, free_range, log, summary, touch
from bench.suite.jobs import Job, attach_all, disconnect_all, guarded, read_phase, wait_files

from support.dap import DAPClient

VERSIONS = ("3.12", "3.13")  # compared with this venv's Python (3.11)
PROBE = (
    "import sys, debugpy, importlib.util as u; "
    "print(sys.version.split()[0], debugpy.__version__, bool(u.find_spec('torch')))"
)


def interpreters(res: dict) -> dict[str, str]:
    """version -> python executable: this venv's, then each .venv-3.X (made by scripts/pythons.sh if missing)."""
    info: dict[str, Any] = {}
    res["pythons"] = {"info": info}
    found = {platform.python_version().rsplit(".", 1)[0]: PY}
    missing = [v for v in VERSIONS if not (ROOT / f".venv-{v}" / "bin" / "python").exists()]
    if missing:
        log(f"5: creating .venv-{', .venv-'.join(missing)} (scripts/pythons.sh)")
        subprocess.run(
            ["bash", str(ROOT / "scripts" / "pythons.sh"), *missing],
            cwd=ROOT,
            env=dict(os.environ, RTDEBUG_PYTHONS_REQUIRED="0"),
            capture_output=True,
            timeout=900,
        )
    for v in VERSIONS:
        exe = ROOT / f".venv-{v}" / "bin" / "python"
        if exe.exists():
            found[v] = str(exe)
        else:
            res["pythons"].setdefault("notes", []).append(f"no .venv-{v}: no Python {v} found by scripts/pythons.sh")
    for v, python in found.items():
        out = subprocess.run([python, "-c", PROBE], capture_output=True, text=True, timeout=60).stdout.split()
        info[v] = {"python": out[0], "debugpy": out[1], "torch": out[2] == "True"} if len(out) == 3 else {}
    return found


def single_rank(python: str, kind: str, args: list[str], cpu: int | None) -> tuple[Job, Path, Path, int]:
    tmp = Path(tempfile.mkdtemp(prefix=f"py-{kind}-", dir=WORK))
    ctl = tmp / "ctl"
    ctl.mkdir()
    env = base_env(tmp / "registry")
    port = free_range(1)
    loop = [str(LOOP), "--ctl", str(ctl), *args]
    if kind == "plain":
        cmd = [python, *loop]
    else:  # the rank bootstrap exactly as torchrun would start it, as rank 0 of 1
        env.update(
            RANK="0",
            LOCAL_RANK="0",
            WORLD_SIZE="1",
            LOCAL_WORLD_SIZE="1",
            RTDEBUG_SESSION=f"bench-{os.getpid()}-{port}",
            RTDEBUG_PORT_BASE=str(port),
        )
        cmd = [python, "-m", "rtdebug.rank.bootstrap", *loop]
    return Job(cmd, env, cpu=cpu), tmp, ctl, port


PY_PHASES = ("lazy", "attached", "detached")


def py_versions(res: dict, rounds: int, window: float, windows: int) -> None:
    """Single process, torch-free loop, per Python: plain python twice (A/A) and the harness bootstrap run
    AT THE SAME TIME pinned to the same core (the other core in the next round); every phase starts in all
    three at the same instant, so the machine's drift hits every side of each ratio alike."""
    pythons = guarded(res, "python venvs", lambda: interpreters(res)) or {}
    raw: dict[str, dict[str, list]] = {v: {f"{m}_{ph}": [] for m in METRICS for ph in PY_PHASES} for v in pythons}
    aa: dict[str, list] = {v: [] for v in pythons}
    absolute: dict[str, list] = {v: [] for v in pythons}
    attach_s: dict[str, list] = {v: [] for v in pythons}
    for rnd in range(rounds):
        for v, exe in pythons.items():
            log(f"5 round {rnd + 1}/{rounds}: python {v}, plain, plain again and harness side by side")
            args = [
                "--mode",
                "py",
                "--warmup-steps",
                "3000",
                "--window",
                str(window),
                "--windows",
                str(windows),
                "--phases",
                ",".join(PY_PHASES),
                "--hold",
                "--pin",
                str(rnd % 2),
            ]

            def go(v=v, exe=exe, args=args, rnd=rnd):
                jobs = {
                    k: single_rank(exe, "harness" if k == "harness" else "plain", args, None)
                    for k in (("plain", "harness", "plain2") if rnd % 2 == 0 else ("harness", "plain2", "plain"))
                }
                try:
                    wait_files([j[2] / "warm-0" for j in jobs.values()], 60)
                    clients: list[DAPClient] = []
                    for ph in PY_PHASES:
                        if ph == "attached":
                            t = time.time()
                            clients, _ = attach_all([jobs["harness"][3]])
                            attach_s[v].append(time.time() - t)
                        if ph == "detached":
                            disconnect_all(clients)
                            time.sleep(0.5)
                        for j in jobs.values():
                            touch(j[2] / f"go-{ph}")
                        got = {k: read_phase(j[2], ph, 1, j[0]) for k, j in jobs.items()}
                        for m in METRICS:
                            raw[v][f"{m}_{ph}"].append(got["harness"][m] / got["plain"][m])
                        aa[v].append(got["plain2"]["wall"] / got["plain"]["wall"])
                        if ph == "lazy":
                            absolute[v].append(got["plain"]["wall"])
                    for j in jobs.values():
                        touch(j[2] / "stop")
                finally:
                    for j in jobs.values():
                        j[0].kill()
                        shutil.rmtree(j[1], ignore_errors=True)

            guarded(res, f"python {v} round {rnd + 1}", go)
    out = {}
    for v in pythons:
        out[v] = {
            "ratio": {k: summary(x) for k, x in raw[v].items()},
            "abs": {"plain": summary(absolute[v])},
            "attach_s": summary(attach_s[v]),
            "aa": summary(aa[v]),
            "raw": raw[v],
            "raw_aa": aa[v],
        }
    res.setdefault("pythons", {})["runs"] = out
