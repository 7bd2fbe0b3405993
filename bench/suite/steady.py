"""Section 1: steady-state steps/s at N=2, five configurations side by side."""

from __future__ import annotations

import statistics
import time

from bench.suite.common import METRICS, log, summary, touch
from bench.suite.jobs import Run, attach_all, disconnect_all, guarded, read_phase, wait_files

from support.dap import DAPClient

STEADY_KINDS = ("plain", "lazy", "eager", "plain2", "recipe")
STEADY_KEYS = ("plain", "plain2", "lazy", "attached", "detached", "eager", "recipe")
PHASES = ("p1", "p2", "p3")  # in the harness job: p1 lazy, p2 attached (no breakpoints), p3 after detach


def steady_state(res: dict, rounds: int, mode: str, window: float, windows: int, warmup: int) -> None:
    """All five configurations run AT THE SAME TIME, rank r of every job pinned to core r (the
    cores swap every round), and each phase starts in all jobs at the same instant. Every job keeps
    stepping until all are done, so the CPU share each gets stays equal; other load on the machine
    hits all of them alike, and each ratio compares runs measured in the same seconds."""
    args = [
        "--mode",
        mode,
        "--warmup-steps",
        str(warmup),
        "--window",
        str(window),
        "--windows",
        str(windows),
        "--phases",
        ",".join(PHASES),
        "--hold",
    ]
    raw: dict[str, dict[str, list]] = {m: {k: [] for k in STEADY_KEYS} for m in METRICS}
    vs_lazy: dict[str, dict[str, list]] = {m: {"attached": [], "detached": []} for m in METRICS}
    absolute: dict[str, list] = {k: [] for k in STEADY_KEYS}
    for rnd in range(rounds):
        order = STEADY_KINDS[rnd % 5 :] + STEADY_KINDS[: rnd % 5]  # rotate who starts first
        log(f"1/{mode} round {rnd + 1}/{rounds}: {', '.join(order)} side by side")

        def go(order=order, rnd=rnd):
            runs: dict[str, Run] = {}
            try:
                for kind in order:
                    runs[kind] = Run("plain" if kind == "plain2" else kind, 2, [*args, "--pin", str(rnd % 2)])
                for r in runs.values():
                    wait_files(r.rank_files("warm"), 300, r.job)
                got: dict[str, dict[str, dict[str, float]]] = {k: {} for k in runs}
                clients: list[DAPClient] = []
                for ph in PHASES:
                    if ph == "p2":
                        clients, _ = attach_all([runs["lazy"].base, runs["lazy"].base + 1])
                    if ph == "p3":
                        disconnect_all(clients)
                        time.sleep(0.5)
                    for r in runs.values():
                        touch(r.ctlf(f"go-{ph}"))
                    for k, r in runs.items():
                        got[k][ph] = read_phase(r.ctl, ph, 2, r.job)
                for r in runs.values():
                    touch(r.ctlf("stop"))
            finally:
                for r in runs.values():
                    r.close()
            return got

        got = guarded(res, f"steady-state {mode} round {rnd + 1}", go)
        if not got:
            continue
        pl = got["plain"]
        for m in METRICS:

            def over_phases(k: str, got=got, pl=pl, m=m) -> float:
                return statistics.median(got[k][ph][m] / pl[ph][m] for ph in PHASES)

            raw[m]["plain"].append(1.0)
            raw[m]["lazy"].append(got["lazy"]["p1"][m] / pl["p1"][m])
            raw[m]["attached"].append(got["lazy"]["p2"][m] / pl["p2"][m])
            raw[m]["detached"].append(got["lazy"]["p3"][m] / pl["p3"][m])
            for k in ("plain2", "eager", "recipe"):
                raw[m][k].append(over_phases(k))
            vs_lazy[m]["attached"].append(got["lazy"]["p2"][m] / got["lazy"]["p1"][m])
            vs_lazy[m]["detached"].append(got["lazy"]["p3"][m] / got["lazy"]["p1"][m])
        for k in STEADY_KEYS:
            src = {"lazy": ("lazy", "p1"), "attached": ("lazy", "p2"), "detached": ("lazy", "p3")}.get(k, (k, "p1"))
            absolute[k].append(got[src[0]][src[1]]["wall"])
        log("  ratio vs plain (median window) " + ", ".join(f"{k}={raw['wall'][k][-1]:.3f}" for k in STEADY_KEYS))

    res.setdefault("steady", {})[mode] = {
        "abs": {k: summary(v) for k, v in absolute.items()},
        "ratio": {m: {k: summary(v) for k, v in raw[m].items()} for m in METRICS},
        "vs_lazy": {m: {k: summary(v) for k, v in vs_lazy[m].items()} for m in METRICS},
        "raw": raw,
        "args": args,
    }
