"""The GPU check's driver: every NCCL and CUDA path of rtdebug once, on a lent GPU machine, in one run.

    bash scripts/gpu-check.sh [--only NAME,...] [--list] [--dry] ...     (OUT=/empty/dir)

Runs on the machine's own Python (stdlib only, plus the helpers of tests/support: the DAP client, jobs, ports;
scripts/gpu-check.sh puts scripts/gpu_check and tests on PYTHONPATH). It installs rtdebug
from the wheelhouse (scripts/gpu-bundle.sh) into a fresh venv with --system-site-packages and no network, so
the machine's own torch with CUDA is used; then each check starts real jobs (``rtdebug torchrun``, plain
torchrun for adopt) of scripts/gpu_check/rank_job.py and looks at them from outside, as a user would. Each
check has its own time limit; one that fails is recorded and the next runs. ``$OUT/gpu-check.json`` and
``$OUT/summary.txt`` (scripts/gpu_check/results.py) are written after every check, so a run cut short still
says how far it came; each job's log is in ``$OUT/logs/``.

``--dry``: the same checks on CPU with gloo (``GPU_CHECK_DEVICE=cpu``), short, with an rtdebug already
installed (``--python``): what tests/project/test_gpu_check.py runs so the scripts cannot rot. It proves
nothing about a GPU.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

import checks
import results as res
from jobs import Ctx

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent

PROG = "gpu-check"


class Ended(Exception):
    """SIGTERM (gpu-check.sh's time limit, or the machine going back): the run ends, its results written."""


def _ended(signum: int, _frame: object) -> None:
    raise Ended(f"ended by signal {signum} (the run's time limit?)")


class Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # type: ignore[override]
        sys.stderr.write(f"{PROG}: error: {message}\n")
        sys.exit(2)


def parser() -> Parser:
    p = Parser(
        prog=PROG,
        description="rtdebug's NCCL/CUDA paths, checked on a GPU machine in one run "
        "(docs/gpu-check.md). Writes $OUT/gpu-check.json and $OUT/summary.txt.",
    )
    p.add_argument("--out", help="an empty folder for the results (default: $OUT)")
    p.add_argument("--only", help="comma-separated check names (see --list); default: every check")
    p.add_argument("--list", action="store_true", help="print the checks and what each proves, and exit")
    p.add_argument("--dry", action="store_true", help="CPU and gloo, no GPU needed: exercises the scripts only")
    p.add_argument("--python", help="an interpreter that already has rtdebug (skips the install from the wheelhouse)")
    p.add_argument("--wheelhouse", default=str(ROOT / ".gpu-wheelhouse"), help="default: %(default)s")
    p.add_argument("--budget", type=float, default=450.0, help="seconds for everything (default %(default)s)")
    p.add_argument("--hold", type=float, default=40.0, help="seconds pg_timeout holds a rank (default %(default)s)")
    p.add_argument("--limit", action="append", default=[], metavar="NAME=S", help="a check's own time limit")
    p.add_argument("--bench-seconds", type=float, default=6.0, help="timed seconds per bench job (%(default)s)")
    p.add_argument("--bench-rounds", type=int, default=2, help="rounds of the 4 bench jobs (default %(default)s)")
    return p


def options(argv: list[str]) -> argparse.Namespace:
    p = parser()
    a = p.parse_args(argv)
    names = [n for n, *_ in checks.CHECKS]
    a.selected = names
    if a.only is not None:
        a.selected = [n.strip() for n in a.only.split(",") if n.strip()]
        unknown = [n for n in a.selected if n not in names]
        if unknown or not a.selected:
            p.error(f"--only: no check named {','.join(unknown) or repr(a.only)} (the checks: {','.join(names)})")
    for flag in ("budget", "hold", "bench_seconds"):
        if not getattr(a, flag) > 0:
            p.error(f"--{flag.replace('_', '-')} must be a positive number of seconds")
    a.limits = {}
    for spec in a.limit:
        name, _, value = spec.partition("=")
        try:
            seconds = float(value)
        except ValueError:
            seconds = 0.0
        if name not in names or not seconds > 0:
            p.error(f"--limit {spec}: want NAME=SECONDS with a check's name (the checks: {','.join(names)})")
        a.limits[name] = seconds
    if a.bench_rounds < 1:
        p.error("--bench-rounds must be 1 or more")
    if a.python:
        found = shutil.which(a.python)
        if found is None:
            p.error(f"--python {a.python}: no such interpreter")
        a.python = os.path.abspath(found)
    a.out = a.out or os.environ.get("OUT")
    if not a.list and not a.out:
        p.error("no output folder: set $OUT or pass --out DIR")
    return a


def _torch_probe(python: str) -> tuple[str | None, dict[str, str]]:
    """(why there is no CUDA GPU, or None; what torch says about the machine)."""
    code = (
        "import json, sys, torch; c = torch.cuda.is_available(); print(json.dumps({'torch': torch.__version__, "
        "'cuda': str(torch.version.cuda), 'available': c, 'gpu': torch.cuda.get_device_name(0) if c else '', "
        "'python': sys.version.split()[0]}))"
    )
    try:
        r = subprocess.run([python, "-c", code], capture_output=True, text=True, timeout=120)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"{python} did not answer: {type(exc).__name__}", {}
    if r.returncode != 0:
        last = (r.stderr.strip().splitlines() or ["no output"])[-1]
        return f"torch does not import in {python}: {last[:160]}", {}
    info = json.loads(r.stdout.strip().splitlines()[-1])
    if not info["available"]:
        return f"torch {info['torch']} sees no CUDA device", info
    return None, info


def no_gpu(python: str) -> tuple[str | None, dict[str, str]]:
    if shutil.which("nvidia-smi") is None:
        return "no nvidia-smi on PATH", {}
    return _torch_probe(python)


def run_one(ctx: Ctx, name: str, fn: Callable[[Ctx], tuple[bool, dict]], limit: float) -> res.Result:
    """One check in a thread, with its own time limit; past it its processes are ended and it is recorded."""
    box: dict[str, object] = {}

    def body() -> None:
        try:
            box["value"] = fn(ctx)
        except Exception as exc:
            box["error"] = f"{type(exc).__name__}: {exc}"

    ctx.partial = {}
    t0 = time.monotonic()
    t = threading.Thread(target=body, daemon=True, name=f"check {name}")
    ctx.owner = t.name  # only this thread may start processes now (jobs.Ctx.start)
    t.start()
    t.join(limit)
    late = t.is_alive()
    ctx.owner = ""  # a check past its limit starts nothing more
    ctx.end_all()
    t.join(10)
    if late:  # what the check then raised, its jobs ended under it, says nothing more
        box["error"] = f"timed out after {limit:.0f} s"
    seconds = round(time.monotonic() - t0, 2)
    if "error" in box:
        return res.Result(name, False, {"error": str(box["error"])[:2000], **ctx.partial}, seconds)
    ok, details = box["value"]  # type: ignore[misc]
    return res.Result(name, bool(ok), details, seconds)


def meta_of(a: argparse.Namespace, probe: dict[str, str]) -> dict[str, object]:
    m: dict[str, object] = {
        "dry": a.dry,
        "started": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
        "host_python": platform.python_version(),
        "budget_s": a.budget,
    }
    m.update({k: probe[k] for k in ("gpu", "torch", "cuda", "python") if probe.get(k)})
    try:  # the checkout this run checked (a copied tree may have no .git)
        head = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"], capture_output=True, text=True)
        m["commit"] = head.stdout.strip() or None
    except OSError:
        m["commit"] = None
    if not a.dry and shutil.which("nvidia-smi"):
        query = ["nvidia-smi", "--query-gpu=name,driver_version,memory.total", "--format=csv,noheader"]
        try:
            m["nvidia_smi"] = subprocess.run(query, capture_output=True, text=True, timeout=30).stdout.strip()[:200]
        except (OSError, subprocess.TimeoutExpired) as exc:
            m["nvidia_smi"] = f"no answer: {type(exc).__name__}"
    return m


def _write(out: Path, meta: dict[str, object], done: list[res.Result]) -> None:
    res.write(out / "gpu-check.json", meta, done)
    (out / "summary.txt").write_text(res.summary(meta, done))


def main(argv: list[str]) -> int:
    a = options(argv)
    if a.list:
        for name, _fn, _limit, what in checks.CHECKS:
            print(f"{name:<20} {what}")
        return 0
    base_python = a.python or sys.executable
    why, probe = (None, {}) if a.dry else no_gpu(base_python)
    if why is not None:
        print(f"{PROG}: error: no CUDA GPU here ({why})", file=sys.stderr)
        return 2
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="gpu-check-"))
    ctx = Ctx(
        root=ROOT,
        out=out,
        work=work,
        dry=a.dry,
        python=a.python or "",
        wheelhouse=Path(a.wheelhouse),
        hold_s=a.hold,
        bench_seconds=a.bench_seconds,
        bench_rounds=a.bench_rounds,
    )
    meta, done = meta_of(a, probe), []
    deadline = time.monotonic() + a.budget
    signal.signal(signal.SIGTERM, _ended)
    name = ""
    try:
        for name, fn, limit, _what in checks.CHECKS:
            if name not in a.selected and name != "install":
                continue
            left = deadline - time.monotonic()
            if not ctx.python and name != "install":
                done.append(res.Result(name, False, {"error": "not run: rtdebug is not installed (see install)"}))
            elif left < 10:
                done.append(res.Result(name, False, {"error": f"not run: the run's {a.budget:.0f} s were spent"}))
            else:
                done.append(run_one(ctx, name, fn, min(a.limits.get(name, limit), left)))
            _write(out, meta, done)
    except (Ended, KeyboardInterrupt) as exc:
        done.append(res.Result(name, False, {"error": str(exc) or "interrupted", **ctx.partial}))
    finally:
        ctx.end_all()
        shutil.rmtree(work, ignore_errors=True)
        _write(out, meta, done)
    sys.stdout.write(res.summary(meta, done))
    return 0 if all(r.ok for r in done) else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
