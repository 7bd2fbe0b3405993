"""The GPU check's checks: each starts real jobs of rank_job.py and returns (ok, details).

``CHECKS`` is the list, in the order they run: (name, function, time limit in seconds, what it proves).
"""

from __future__ import annotations

import json
import os
import shutil
import site
import statistics
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

from jobs import RANK_SCRIPT, Ctx, rank_line

from support.wait import until

RANK = str(RANK_SCRIPT)
PG_TIMEOUT_S = 7200.0  # rtdebug torchrun's default --pg-timeout
TORCH_NCCL_DEFAULTS = "torch's own defaults: NCCL process-group timeout 600 s, heartbeat 480 s"
Details = dict[str, Any]


def _run(argv: list[object], timeout: float, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(list(map(str, argv)), capture_output=True, text=True, timeout=timeout, env=env)


def _pip_env() -> dict[str, str]:
    """No pip configuration of this machine (an index, constraints): only the wheelhouse counts."""
    e = {k: v for k, v in os.environ.items() if not k.startswith("PIP_")}
    e.update(PIP_CONFIG_FILE=os.devnull, PIP_DISABLE_PIP_VERSION_CHECK="1", PIP_NO_INPUT="1")
    return e


def _see_base_packages(venv: Path) -> None:
    """The venv sees this Python's own packages (torch with CUDA), after its own: ``--system-site-packages``
    alone gives only the base interpreter's, and the machine's python3 may itself be a venv (/opt/torch/.venv)."""
    mine = [p for p in map(Path, site.getsitepackages()) if p.is_dir()]
    (site_dir,) = (venv / "lib").glob("python3*/site-packages")
    lines = "".join(f"import site; site.addsitedir({str(p)!r})\n" for p in mine)  # their .pth files too
    (site_dir / "gpu-check-base.pth").write_text(lines)


def install(ctx: Ctx) -> tuple[bool, Details]:
    if ctx.python:
        return True, {"summary": f"--python {ctx.python}: nothing installed", "python": ctx.python}
    wheels = sorted(p.name for p in ctx.wheelhouse.glob("*.whl")) if ctx.wheelhouse.is_dir() else []
    if not wheels:
        return False, {"error": f"no wheels in {ctx.wheelhouse}: build them with bash scripts/gpu-bundle.sh"}
    venv = ctx.work / "venv"
    vpy = venv / "bin" / "python"
    made = _run([sys.executable, "-m", "venv", "--system-site-packages", venv], 120)
    pip: list[object] = [vpy, "-m", "pip"]
    if made.returncode != 0:  # no ensurepip: a venv without pip, filled by this Python's own pip
        shutil.rmtree(venv, ignore_errors=True)
        made = _run([sys.executable, "-m", "venv", "--system-site-packages", "--without-pip", venv], 120)
        pip = [sys.executable, "-m", "pip", "--python", vpy]
    if made.returncode != 0:
        return False, {"error": f"python -m venv failed: {made.stderr.strip()[-300:]}"}
    _see_base_packages(venv)
    r = _run(
        [
            *pip,
            "install",
            "--no-index",
            "--find-links",
            ctx.wheelhouse,
            "--no-cache-dir",
            "--ignore-installed",
            "rtdebug",
        ],
        180,
        _pip_env(),
    )
    (ctx.logs / "install.log").write_text(r.stdout + r.stderr)
    if r.returncode != 0:
        return False, {"error": f"pip install --no-index failed: {r.stderr.strip()[-400:]}", "wheels": wheels}
    # where each came from: the wheelhouse's three in the venv, torch from the machine
    probe = (
        "import json, importlib.metadata as m, torch; import rtdebug, debugpy, psutil; print(json.dumps("
        "{k: m.version(k) for k in ('rtdebug', 'debugpy', 'psutil')} | {'torch': torch.__version__, "
        "'rtdebug_from': rtdebug.__file__, 'torch_from': torch.__file__, 'cuda': torch.cuda.is_available()}))"
    )
    p = _run([vpy, "-c", probe], 120)
    if p.returncode != 0:
        return False, {"error": f"the venv cannot import rtdebug/torch: {p.stderr.strip()[-400:]}", "wheels": wheels}
    seen = json.loads(p.stdout.strip().splitlines()[-1])
    ctx.python = str(vpy)
    ok = (bool(seen["cuda"]) or ctx.dry) and str(seen["rtdebug_from"]).startswith(str(venv))
    text = f"rtdebug {seen['rtdebug']}, debugpy {seen['debugpy']}, psutil {seen['psutil']} from the wheelhouse; "
    return ok, {
        "summary": text + f"torch {seen['torch']} (CUDA {seen['cuda']}) from the machine",
        **seen,
        "wheels": wheels,
    }


def _ev(c: Any, frame: int, **exprs: str) -> dict[str, str]:
    return {k: c.evaluate(e, frame) for k, e in exprs.items()}


def _device(ctx: Ctx) -> str:
    return "'cpu'" if ctx.dry else "'cuda:0'"


def lazy_dap(ctx: Ctx) -> tuple[bool, Details]:
    base = ctx.free_base()
    info, control = ctx.files("dap")
    j = ctx.torchrun("lazy_dap", base, ["dap", info, control])
    sid = j.session_id()
    seen = ctx.note(info, 1, 120, j)
    before = until(lambda: ctx.entry(sid), 60, "rank 0's entry", ok=lambda e: e.get("state") == "ready")
    c = ctx.client(base)
    line = rank_line("dap loop")
    c.attach({RANK: [line]})
    ev = c.wait_stopped(60)
    frame = c.top_frame(ev["threadId"])
    got = _ev(c, frame["id"], device="str(x.device)", sum="x.sum().item()", backend="dist.get_backend()")
    ctx.partial.update(evaluated=got, stopped_line=frame["line"])
    attached = ctx.entry(sid).get("state")
    c.request("setBreakpoints", source={"path": RANK}, breakpoints=[])
    c.continue_(ev["threadId"])
    c.disconnect()
    control.touch()
    rc = j.wait(90)
    want = {"device": _device(ctx), "sum": "18.0", "backend": "'gloo'" if ctx.dry else "'nccl'"}
    ok = rc == 0 and before.get("lazy") is True and frame["line"] == line and got == want
    text = (
        f"lazy endpoint (lazy={before.get('lazy')} before attach, {attached} after); stopped at rank_job.py:"
        f"{frame['line']}; x.device {got['device']}, x.sum() {got['sum']}, backend {got['backend']}; exit {rc}"
    )
    return ok, {"summary": text, "evaluated": got, "wanted": want, "rank_saw": seen, "exit": rc}


def stop_on_nonfinite(ctx: Ctx) -> tuple[bool, Details]:
    base, nan_step = ctx.free_base(), 3
    info, _ = ctx.files("stopon")
    j = ctx.torchrun("stop_on", base, ["stopon", info, "--steps", 8, "--nan-step", nan_step], "--stop-on", "nonfinite")
    sid = j.session_id()
    stop = until(lambda: ctx.entry(sid).get("stop"), 120, "rank 0 stopped by --stop-on", context=j.tail)
    ctx.partial["stop"] = stop
    first = ctx.cmd("stacks", "--session", sid).stdout.splitlines()[:1]
    c = ctx.client(base)
    c.attach()
    ev = c.wait_stopped(60)
    frame = c.top_frame(ev["threadId"])
    got = _ev(
        c,
        frame["id"],
        steps_done="steps_done",
        grad_device="str(net.fc1.weight.grad.device)",
        weights_finite="bool(torch.isfinite(net.fc1.weight).all())",
        grad_finite="bool(torch.isfinite(net.fc1.weight.grad).all())",
    )
    c.close()
    stopped = ctx.cmd("stop", "--session", sid)
    j.wait(60)
    want = {"steps_done": str(nan_step), "grad_device": _device(ctx), "weights_finite": "True", "grad_finite": "False"}
    ok = (
        stop.get("kind") == "nonfinite"
        and stop.get("origin") is True
        and stop.get("step") == nan_step
        and got == want
        and str(ev.get("description", "")).startswith("rtdebug --stop-on nonfinite")
    )
    text = (
        f"stopped: {stop.get('reason')}; before the optimizer step (steps_done {got['steps_done']}), "
        f"grad on {got['grad_device']}"
    )
    return ok, {
        "summary": text,
        "stop": stop,
        "evaluated": got,
        "wanted": want,
        "stacks_first_line": first,
        "stop_exit": stopped.returncode,
        "event": ev.get("description"),
    }


def stacks_flight(ctx: Ctx) -> tuple[bool, Details]:
    base = ctx.free_base()
    info, control = ctx.files("collectives")
    busy = 0 if ctx.dry else int(os.environ.get("GPU_CHECK_BUSY_CYCLES", 30_000_000_000))
    j = ctx.torchrun("stacks_flight", base, ["collectives", info, control, "--steps", 5, "--busy-cycles", busy])
    sid = j.session_id()
    ctx.note(info, 1, 120, j)  # the last collective is issued (behind the busy stream on a GPU)
    raw = ctx.cmd("stacks", "--session", sid, "--history", "8", "--json")
    text = ctx.cmd("stacks", "--session", sid, "--history", "8").stdout
    synced = Path(f"{info}.2").exists()  # the busy stream had already drained: the collective was not in flight
    recorders = ctx.note(info, 2, 120, j).get("recorders")
    control.touch()
    rc = j.wait(60)
    js = json.loads(raw.stdout) if raw.returncode == 0 else {}
    rows = [r for g in (js.get("history") or {}).get("groups", []) for r in g.get("rows", [])]
    cells = [cell for r in rows for cell in r.get("cells", {}).values()]
    colls = [c for g in js.get("groups", []) for c in g.get("collectives", [])]
    ok = (
        rc == 0
        and js.get("collectives_from") == "flight recorder"
        and not js.get("flight_note")
        and any("ALLREDUCE" in cell for cell in cells)
    )
    gist = f"collectives from {js.get('collectives_from')}; history {len(rows)} rows ({', '.join(cells[-3:])})"
    return ok, {
        "summary": gist + f"; verdict: {js.get('verdict')}; recorder entries {recorders}",
        "verdict": js.get("verdict"),
        "flight_note": js.get("flight_note"),
        "collectives": colls[:4],
        "history_cells": cells[-12:],
        "in_flight_when_asked": not synced,
        "recorder_entries": recorders,
        "text": text.splitlines()[:40],
        "exit": rc,
        "stacks_error": raw.stderr.strip()[-300:],
    }


def stacks_gloo_cuda(ctx: Ctx) -> tuple[bool, Details]:
    """The multi-rank path NCCL cannot take on one GPU: two gloo ranks with CUDA tensors, one skips a collective."""
    base = ctx.free_base()
    info, _ = ctx.files("hang")
    j = ctx.torchrun("stacks_gloo_cuda", base, ["hang", info, "--steps", 3], nproc=2, GPU_CHECK_BACKEND="gloo")
    sid = j.session_id()
    seen = [ctx.note(Path(f"{info}.r{r}"), 1, 120, j) for r in (0, 1)]
    raw = ctx.cmd("stacks", "--session", sid, "--json", "--timeout", "10")
    text = ctx.cmd("stacks", "--session", sid).stdout
    stopped = ctx.cmd("stop", "--session", sid)
    j.wait(60)
    js = json.loads(raw.stdout) if raw.returncode == 0 else {}
    verdict = js.get("verdict") or ""
    ok = (
        all(s.get("device") == _device(ctx).strip("'") and s.get("backend") == "gloo" for s in seen)
        and js.get("collectives_from") == "flight recorder"
        and "BARRIER" in verdict
        and "ALLREDUCE" in verdict
    )
    return ok, {
        "summary": f"verdict: {verdict or None}",
        "verdict": verdict or None,
        "culprit": js.get("culprit"),
        "collectives_from": js.get("collectives_from"),
        "ranks_saw": seen,
        "text": text.splitlines()[:12],
        "stop_exit": stopped.returncode,
    }


def pg_timeout(ctx: Ctx) -> tuple[bool, Details]:
    base = ctx.free_base()
    info, control = ctx.files("hold")
    j = ctx.torchrun("pg_timeout", base, ["hold", info, control])
    sid = j.session_id()
    seen = ctx.note(info, 1, 120, j)
    ctx.partial["rank_saw"] = seen
    c = ctx.client(base)
    line = rank_line("hold")
    c.attach({RANK: [line]})
    control.touch()
    ev = c.wait_stopped(60)
    ps = ctx.cmd("ps", "--json")
    session = next((s for s in json.loads(ps.stdout or "{}").get("sessions", []) if s["session_id"] == sid), {})
    threading.Event().wait(ctx.hold_s)  # the hold itself: a rank stopped at a breakpoint, its NCCL group live
    c.request("setBreakpoints", source={"path": RANK}, breakpoints=[])
    c.continue_(ev["threadId"])
    c.disconnect()
    after = ctx.note(info, 2, 90, j)
    rc = j.wait(90)
    ok = (
        rc == 0
        and seen.get("default_timeout_s") == PG_TIMEOUT_S
        and seen.get("group_timeout_s") == PG_TIMEOUT_S
        and seen.get("heartbeat_env") == str(int(PG_TIMEOUT_S))
        and after.get("after") == [2.0, 2.0]
        and after.get("held_s", 0) >= ctx.hold_s
    )
    text = (
        f"the rank's {seen.get('backend')} group has timeout {seen.get('group_timeout_s')} s, "
        f"TORCH_NCCL_HEARTBEAT_TIMEOUT_SEC={seen.get('heartbeat_env')}; held {after.get('held_s')} s at a "
        f"breakpoint, the collective after it returned, exit {rc}"
    )
    honest = (
        f"one GPU: NCCL with world size 1, so no peer waited on the held rank; the hold ({ctx.hold_s:.0f} s) "
        f"is shorter than {TORCH_NCCL_DEFAULTS}, which do not fit one 8-minute run. This proves the values "
        "the rank's own NCCL group and environment have, and that a rank held with NCCL's watchdog and "
        "heartbeat running goes on; nothing here was shortened."
    )
    return ok, {
        "summary": text,
        "rank_saw": seen,
        "after": after,
        "note": honest,
        "exit": rc,
        "ps_pg_timeout": [session.get("pg_timeout_s"), session.get("pg_timeout_source")],
    }


def _post_mortem(ctx: Ctx, kind: str) -> tuple[bool, Details]:
    base = ctx.free_base()
    info, control = ctx.files(f"raise-{kind}")
    j = ctx.torchrun(
        f"post_mortem_{kind}", base, ["raise", info, control, "--kind", kind], "--post-mortem", "--post-mortem-wait", 90
    )
    sid = j.session_id()
    ctx.note(info, 1, 120, j)
    control.touch()
    j.wait_output("failed; post-mortem: attach to", 90)
    entry = ctx.entry(sid)
    ctx.partial["entry_error"] = entry.get("error")
    c = ctx.client(base)
    c.attach()
    ev = c.wait_stopped(60)
    frame = c.top_frame(ev["threadId"])
    got = _ev(c, frame["id"], kind="kind", device="str(t.device)")
    c.continue_(ev["threadId"])
    c.disconnect()
    rc = j.wait(90)
    line = rank_line(kind)
    ok = (
        ev.get("reason") == "exception"
        and frame["line"] == line
        and got["kind"] == repr(kind)
        and entry.get("state") == "failed"
        and rc != 0
    )
    text = f"{entry.get('error')}; stopped at the raise site (line {frame['line']}), t on {got['device']}; exit {rc}"
    return ok, {
        "summary": text,
        "error_in_entry": entry.get("error"),
        "state": entry.get("state"),
        "stopped": {"reason": ev.get("reason"), "line": frame["line"], "function": frame.get("name")},
        "evaluated": got,
        "exit": rc,
    }


def post_mortem_oom(ctx: Ctx) -> tuple[bool, Details]:
    return _post_mortem(ctx, "oom")


def post_mortem_assert(ctx: Ctx) -> tuple[bool, Details]:
    return _post_mortem(ctx, "assert")


def adopt(ctx: Ctx) -> tuple[bool, Details]:
    base = ctx.free_base()
    info, control = ctx.files("adopt")
    j = ctx.start(
        "adopt_job",
        [
            ctx.python,
            "-m",
            "torch.distributed.run",
            "--standalone",
            "--nproc-per-node",
            "1",
            RANK,
            "dap",
            str(info),
            str(control),
        ],
    )
    seen = ctx.note(info, 1, 120, j)
    r = ctx.cmd("adopt", j.proc.pid, "--debug-port-base", base, timeout=120)
    ctx.partial["adopt"] = (r.stdout + r.stderr).strip()[-600:]
    if r.returncode != 0:
        return False, {"error": f"rtdebug adopt exit {r.returncode}: {r.stderr.strip()[-400:]}", "rank_saw": seen}
    sid = next(
        p.name
        for p in ctx.registry.iterdir()
        if (p / "session.json").exists() and json.loads((p / "session.json").read_text()).get("mode") == "adopted"
    )
    c = ctx.client(base)
    line = rank_line("dap loop")
    c.attach({RANK: [line]})
    ev = c.wait_stopped(60)
    frame = c.top_frame(ev["threadId"])
    got = _ev(c, frame["id"], device="str(x.device)", sum="x.sum().item()")
    c.request("setBreakpoints", source={"path": RANK}, breakpoints=[])
    c.continue_(ev["threadId"])
    c.disconnect()
    d = ctx.cmd("adopt", "--detach", sid)
    control.touch()
    rc = j.wait(90)
    ok = got == {"device": _device(ctx), "sum": "18.0"} and frame["line"] == line and d.returncode == 0 and rc == 0
    said = next((ln for ln in r.stdout.splitlines() if "timeout" in ln), "")
    return ok, {
        "summary": f"adopted, stopped, x.device {got['device']}; detach exit {d.returncode}; job exit {rc}",
        "adopt_said": r.stdout.strip()[-800:],
        "pg_timeout_line": said,
        "evaluated": got,
        "detach": (d.stdout + d.stderr).strip()[-300:],
        "exit": rc,
    }


BENCH = ("plain", "lazy", "stopon", "collrec_off")


def _bench_job(ctx: Ctx, name: str, n: int) -> float:
    info, _ = ctx.files(f"bench-{name}")
    args: list[object] = ["bench", info, "--seconds", ctx.bench_seconds]
    if ctx.dry:
        args += ["--batch", 2, "--block", 2, "--warmup", 1, "--dim", 32]
    label = f"bench_{name}_{n}"
    if name == "plain":
        j = ctx.start(
            label,
            [ctx.python, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "1", RANK, *map(str, args)],
        )
    else:
        opts = ["--stop-on", "nonfinite"] if name == "stopon" else []
        env = {"RTDEBUG_COLLECTIVES": "0"} if name == "collrec_off" else {}
        j = ctx.torchrun(label, ctx.free_base(), args, *opts, **env)
    rate = float(ctx.note(info, 1, ctx.bench_seconds + 120, j)["steps_per_s"])
    if j.wait(60) != 0:
        raise AssertionError(f"{label} exited {j.proc.returncode}: {j.tail()}")
    return rate


def bench(ctx: Ctx) -> tuple[bool, Details]:
    """steps/s of one job per configuration and round, rounds in ABBA order; ratios of the medians."""
    rates: dict[str, list[float]] = {k: [] for k in BENCH}
    for n in range(ctx.bench_rounds):
        for name in BENCH if n % 2 == 0 else reversed(BENCH):
            rates[name].append(_bench_job(ctx, name, n))
            ctx.partial["steps_per_s"] = rates
    med = {k: statistics.median(v) for k, v in rates.items()}
    ratios = {
        "lazy_vs_plain": med["lazy"] / med["plain"],
        "stopon_vs_off": med["stopon"] / med["lazy"],
        "collrec_on_vs_off": med["lazy"] / med["collrec_off"],
    }
    text = ", ".join(f"{k} {v:.3f}" for k, v in ratios.items())
    how = (
        "a 2-layer transformer encoder (d_model 256, batch 16 x 64 tokens), DDP on one rank, the loss "
        "all_reduced from Python each step; one job per configuration and round, median of blocks of steps"
    )
    return True, {
        "summary": text,
        "ratios": ratios,
        "steps_per_s_median": med,
        "steps_per_s": rates,
        "how": how,
        "off_means": {
            "lazy_vs_plain": "plain torchrun",
            "stopon_vs_off": "rtdebug torchrun without --stop-on",
            "collrec_on_vs_off": "RTDEBUG_COLLECTIVES=0",
        },
    }


CHECKS = [
    ("install", install, 240, "rtdebug from the wheelhouse, no network, on the machine's own torch with CUDA"),
    ("lazy_dap", lazy_dap, 120, "1-rank NCCL rtdebug torchrun: lazy endpoint, a DAP stop, a CUDA tensor evaluated"),
    (
        "stop_on_nonfinite",
        stop_on_nonfinite,
        120,
        "--stop-on nonfinite: a NaN in a CUDA gradient stops the rank before the optimizer step, origin named",
    ),
    (
        "stacks_flight",
        stacks_flight,
        150,
        "rtdebug stacks: the Flight Recorder's NCCL entries in the verdict's "
        "data and --history, one collective in flight",
    ),
    (
        "stacks_gloo_cuda",
        stacks_gloo_cuda,
        120,
        "rtdebug stacks' verdict on 2 gloo ranks with CUDA tensors on the one GPU, one skipping an all_reduce",
    ),
    (
        "pg_timeout",
        pg_timeout,
        200,
        "the NCCL group's timeout and TORCH_NCCL_HEARTBEAT_TIMEOUT_SEC as the rank "
        "sees them; a rank held at a breakpoint finishes",
    ),
    ("post_mortem_oom", post_mortem_oom, 120, "--post-mortem on torch.OutOfMemoryError (a CUDA error) in the rank"),
    ("adopt", adopt, 150, "rtdebug adopt of a running plain-torchrun CUDA rank: a DAP stop, then detach"),
    (
        "bench",
        bench,
        300,
        "steps/s ratios in the same run: lazy vs plain, --stop-on nonfinite vs off, collective record on vs off",
    ),
    ("post_mortem_assert", post_mortem_assert, 120, "--post-mortem on a device-side assert (a sticky CUDA error)"),
]
