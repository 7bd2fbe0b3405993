"""First-attach latency of a lazy rank whose main thread runs a tight pure-Python loop.

    .venv/bin/python bench/attach_probe.py [--tries 10] [--switch-interval 0.0002] [--python PY]

Each try starts the rank bootstrap (rank 0 of 1, lazy) on ``bench/loop.py --mode py``, waits until
the loop is warm, connects a DAP client and times the answer to ``initialize`` (the lazy endpoint
imports and starts debugpy in its accept thread at that moment). ``--switch-interval`` runs the
rank with ``sys.setswitchinterval(S)`` (via a sitecustomize under bench/.work/) to test whether the
delay is the accept thread waiting for the GIL behind the busy main thread.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent
sys.path.insert(0, str(ROOT / "tests"))
from support.dap import DAPClient, DAPError  # noqa: E402

sys.path.insert(0, str(ROOT))
from bench.common import free_range  # noqa: E402


def one(python: str, extra_path: str | None, timeout: float) -> float | None:
    port = free_range(1)
    with tempfile.TemporaryDirectory(dir=BENCH / ".work") as tmp:
        env = dict(
            os.environ,
            RANK="0",
            LOCAL_RANK="0",
            WORLD_SIZE="1",
            LOCAL_WORLD_SIZE="1",
            RTDEBUG_SESSION=f"probe-{port}",
            RTDEBUG_PORT_BASE=str(port),
            RTDEBUG_REGISTRY_DIR=f"{tmp}/registry",
            PYTHONUNBUFFERED="1",
            PYTHONPATH=os.pathsep.join(p for p in (str(ROOT), extra_path) if p),
        )
        p = subprocess.Popen(
            [
                python,
                "-m",
                "rtdebug.rank.bootstrap",
                str(BENCH / "loop.py"),
                "--mode",
                "py",
                "--ctl",
                tmp,
                "--warmup-steps",
                "3000",
            ],
            env=env,
            start_new_session=True,
            stdout=subprocess.DEVNULL,
        )
        try:
            deadline = time.monotonic() + 60
            while not os.path.exists(f"{tmp}/warm-0"):
                if p.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError("rank did not start")
                time.sleep(0.05)
            c = DAPClient("127.0.0.1", port, timeout=timeout)
            t = time.monotonic()
            try:
                c.request(
                    "initialize",
                    adapterID="debugpy",
                    clientID="probe",
                    pathFormat="path",
                    linesStartAt1=True,
                    columnsStartAt1=True,
                )
                return time.monotonic() - t
            except DAPError:
                return None
            finally:
                c.close()
        finally:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tries", type=int, default=10)
    ap.add_argument("--timeout", type=float, default=30.0, help="seconds to wait for the initialize response")
    ap.add_argument("--switch-interval", type=float, help="run the rank with sys.setswitchinterval(S)")
    ap.add_argument("--python", default=sys.executable)
    a = ap.parse_args()
    extra = None
    if a.switch_interval is not None:
        d = BENCH / ".work" / "probe-sitecustomize"
        d.mkdir(parents=True, exist_ok=True)
        (d / "sitecustomize.py").write_text(f"import sys\nsys.setswitchinterval({a.switch_interval!r})\n")
        extra = str(d)
    (BENCH / ".work").mkdir(exist_ok=True)
    times = []
    for i in range(a.tries):
        t = one(a.python, extra, a.timeout)
        times.append(t)
        print(
            f"try {i + 1}: "
            + (f"initialize answered in {t:.2f} s" if t is not None else f"no answer within {a.timeout:g} s"),
            flush=True,
        )
    ok = sorted(t for t in times if t is not None)
    print(f"{len(ok)}/{len(times)} answered" + (f"; median {ok[len(ok) // 2]:.2f} s, max {ok[-1]:.2f} s" if ok else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
