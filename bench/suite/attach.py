"""Section 3: attach-all latency, a DAP client per rank in parallel, one breakpoint, until all stopped."""

from __future__ import annotations

import contextlib
import threading
import time
from typing import Any

from bench.suite.common import HOST, LOOP, log, summary, touch
from bench.suite.jobs import Run, disconnect_all, guarded, wait_files

from support.dap import DAPClient


def breakpoint_line() -> int:
    for i, line in enumerate(LOOP.read_text().splitlines(), 1):
        if "BENCH-BREAKPOINT" in line and "nn.functional" in line:
            return i
    raise RuntimeError("no BENCH-BREAKPOINT line in loop.py")


def attach_latency(res: dict, reps: int, n: int = 4) -> None:
    line = breakpoint_line()
    bp = {str(LOOP): [line]}
    d: dict[str, list] = {"cold_stopped": [], "cold_attached": [], "warm_stopped": [], "warm_attached": []}

    def cycle(r: Run, key: str) -> None:
        ports = [r.base + i for i in range(n)]
        stopped: list[Any] = [None] * n
        clients: list[Any] = [None] * n
        attached: list[Any] = [None] * n
        errors: list[BaseException] = []
        t0 = time.time()

        def one(i: int) -> None:
            try:
                c = DAPClient(HOST, ports[i], timeout=60)
                clients[i] = c
                c.attach(bp)
                attached[i] = time.time()
                ev = c.wait_stopped(60)
                stopped[i] = (time.time(), ev["threadId"])
            except BaseException as exc:
                errors.append(exc)

        threads = [threading.Thread(target=one, args=(i,), daemon=True) for i in range(n)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(75)
        try:
            if errors or None in stopped:
                raise RuntimeError(f"attach-all failed: {errors[:1] or 'timeout'}")
            d[f"{key}_attached"].append(max(attached) - t0)
            d[f"{key}_stopped"].append(max(s[0] for s in stopped) - t0)
        finally:
            for i, c in enumerate(clients):
                if c is None:
                    continue
                with contextlib.suppress(Exception):
                    c.request("setBreakpoints", source={"path": str(LOOP)}, breakpoints=[], timeout=10)
                    if stopped[i]:
                        c.continue_(stopped[i][1])
            disconnect_all([c for c in clients if c is not None])

    for rep in range(reps):
        log(f"3 rep {rep + 1}/{reps}: attach-all, {n} ranks")

        def go():
            r = Run("lazy", n, ["--mode", "local", "--warmup-steps", "50", "--windows", "0", "--hold"])
            try:
                wait_files(r.rank_files("warm"), 240, r.job)
                touch(r.ctlf("go-main"))
                time.sleep(0.5)
                cycle(r, "cold")  # first attach: debugpy imported and started in every rank
                time.sleep(1.0)
                cycle(r, "warm")  # re-attach to the same ranks
            finally:
                r.close()

        guarded(res, f"attach-all rep {rep + 1}", go)
    res["attach"] = {"abs": {k: summary(v) for k, v in d.items()}, "raw": d, "line": line, "n": n}
