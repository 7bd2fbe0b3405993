"""Section 2: launch -> all ranks attachable (harness ready line) vs plain launch -> first step."""

from __future__ import annotations

from bench.suite.common import READY, log, median_ci, summary
from bench.suite.jobs import Run, guarded, wait_files


def launch_times(res: dict, reps: int, ns: list[int], mode: str) -> None:
    out: dict[int, dict[str, list]] = {n: {"plain_first": [], "ready": [], "harness_first": []} for n in ns}
    res["launch_mode"] = mode
    for rep in range(reps):
        for n in ns:
            kinds = ["plain", "lazy"] if rep % 2 == 0 else ["lazy", "plain"]
            for kind in kinds:
                log(f"2 rep {rep + 1}/{reps}: N={n} {kind}")

                def go(kind=kind, n=n):
                    r = Run(kind, n, ["--mode", mode, "--exit-after-first"])
                    try:
                        if kind == "plain":
                            wait_files(r.rank_files("first"), 240, r.job)
                            out[n]["plain_first"].append(r.first_step_s())
                        else:
                            out[n]["ready"].append(r.job.wait_line(READY, 240) - r.job.t_launch)
                            if n == 2:  # the harness's own launch cost to the first step (N > 2: ready only)
                                wait_files(r.rank_files("first"), 240, r.job)
                                out[n]["harness_first"].append(r.first_step_s())
                    finally:
                        r.close()

                guarded(res, f"launch N={n} {kind} rep {rep + 1}", go)
    table = {}
    for n, d in sorted(out.items()):
        k = min(len(d["plain_first"]), len(d["ready"]))
        first = [a / b for a, b in zip(d["harness_first"], d["plain_first"], strict=False)]
        table[n] = {
            "abs": {key: summary(v) for key, v in d.items()},
            # rep-paired ratios: the harness run and the plain run of the same rep
            "ready_ratio": summary([a / b for a, b in zip(d["ready"][:k], d["plain_first"][:k], strict=True)]),
            "first_ratio": summary(first),
            "first_ratio_ci": median_ci(first),
            "raw": d,
        }
    res["launch"] = table
