"""The run's summary: machine and versions, one row per measure with its goal, the printed table."""

from __future__ import annotations

import contextlib
import importlib.metadata as md
import os
import platform
import subprocess
import time
from pathlib import Path
from typing import Any

import psutil

from bench.suite.common import ROOT, fmt


def machine() -> dict[str, Any]:
    cpu = platform.processor() or "?"
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break

    def ver(name: str) -> str:
        try:
            return md.version(name)
        except md.PackageNotFoundError:
            return "not installed"

    def git(*args: str) -> str:
        try:
            return subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True, timeout=10).stdout.strip()
        except (OSError, subprocess.SubprocessError):
            return ""

    harness = git("log", "-1", "--format=%h", "--", "harness")
    if git("status", "--porcelain", "--", "harness"):
        harness += " + uncommitted changes"
    return {
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "nproc": os.cpu_count(),
        "cpu": cpu,
        "harness_commit": harness or "unknown",
        "python": platform.python_version(),
        "platform": platform.platform(),
        "torch": ver("torch"),
        "ray": ver("ray"),
        "debugpy": ver("debugpy"),
        "mem_gb": round(psutil.virtual_memory().total / 2**30, 1),
    }


def verdict(ok: bool | None) -> str:
    return "n/a" if ok is None else ("met" if ok else "**missed**")


def launch_verdict(fr: dict, ci: list[float] | None) -> str:
    """Met only when the median's whole interval is under the goal; a median under it alone is not shown."""
    if ci is None:
        return verdict(fr["median"] <= 1.03)
    if ci[1] <= 1.03:
        return "met"
    return "median met, not shown" if fr["median"] <= 1.03 else "**missed**"


def summary_rows(res: dict) -> list[list[str]]:
    rows = []
    for mode, s in res.get("steady", {}).items():
        r = s["ratio"]["wall"]
        lz = r["lazy"]
        aa = fmt(r["plain2"], 3)
        rows.append(
            [
                f"steps/s, harness lazy / plain (N=2, `{mode}`)",
                fmt(lz, 3),
                "≥ 0.99",
                verdict(lz["median"] >= 0.99 if lz.get("n") else None) + f" (A/A plain/plain: {aa})",
            ]
        )
        for k, name in (
            ("eager", "`--eager`"),
            ("recipe", "`debugpy.listen` recipe"),
            ("attached", "attached, no breakpoints"),
            ("detached", "after detach"),
        ):
            rows.append([f"steps/s, {name} / plain (N=2, `{mode}`)", fmt(r[k], 3), "—", "—"])
    for n, t in res.get("launch", {}).items():
        rr = t["ready_ratio"]
        rows.append(
            [
                f"launch → attachable / plain launch → first step, N={n}",
                fmt(rr, 3),
                "≤ 1.05",
                verdict(rr["median"] <= 1.05 if rr.get("n") else None),
            ]
        )
    for n, t in res.get("launch", {}).items():
        fr, ci = t["first_ratio"], t.get("first_ratio_ci")
        if fr.get("n"):
            shown = fmt(fr, 3) + (f", median 95% CI {ci[0]:.3f}–{ci[1]:.3f}" if ci else "")
            rows.append([f"launch → first step, harness / plain, N={n}", shown, "≤ 1.03", launch_verdict(fr, ci)])
    if "attach" in res:
        c = res["attach"]["abs"]["cold_stopped"]
        rows.append(
            [
                f"attach-all → all {res['attach']['n']} ranks stopped (cold)",
                fmt(c, 2, " s"),
                "≤ 2 s",
                verdict(c["median"] <= 2.0 if c.get("n") else None),
            ]
        )
        w = res["attach"]["abs"]["warm_stopped"]
        rows.append(["attach-all → all stopped (re-attach)", fmt(w, 2, " s"), "—", "—"])
    if "many" in res:
        a = res["many"]["abs"]
        rows.append(
            [
                f"{res['many']['n']} ranks: launch → all ready",
                fmt(a["ready"], 2, " s"),
                "all register",
                verdict(a["ready"].get("n", 0) > 0 and a["attach_all"].get("n", 0) > 0),
            ]
        )
    for v, r in pythons_result(res).get("runs", {}).items():
        for ph, name in (("lazy", "lazy"), ("attached", "attached no-bp"), ("detached", "after detach")):
            rows.append(
                [f"Python {v}, `py` loop, 1 process: {name} / plain", fmt(r["ratio"][f"wall_{ph}"], 3), "—", "—"]
            )
    return rows


def pythons_result(res: dict) -> dict:
    """Section 5's results (``py312`` in results.json files written before 3.13 joined)."""
    return res.get("pythons") or res.get("py312") or {}


def print_table(res: dict) -> None:
    rows = [["Measure", "Result", "Goal", "Verdict"]] + summary_rows(res)
    w = [max(len(r[i]) for r in rows) for i in range(4)]
    for i, r in enumerate(rows):
        print("  ".join(c.ljust(w[j]) for j, c in enumerate(r)).rstrip())
        if i == 0:
            print("  ".join("-" * x for x in w))
