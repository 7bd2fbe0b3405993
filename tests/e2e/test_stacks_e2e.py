"""`rtdebug stacks` and the launcher's hang report on real torchrun / `rtdebug run` jobs (gloo, CPU)."""

from __future__ import annotations

import json
import os
import signal
import time

import jsonschema
import pytest

from rtdebug.registry.entry import SCHEMA_PATH
from rtdebug.stacks.contract import SIGNAL
from rtdebug.stacks.native import find_py_spy

from support.dap import DAPClient
from support.jobs import rtdebug, wait_ranks
from support.paths import EXAMPLES, SCRIPTS, marker_line
from support.wait import finishes, stays, until

pytestmark = pytest.mark.e2e

HANG = EXAMPLES / "hang.py"
ARROW = "\u2190"


def stacks_json(*args: str, timeout: float = 60) -> dict:
    out = rtdebug("stacks", "--json", *args, timeout=timeout)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def wait_groups(sid: str, pred, timeout: float = 120) -> dict:
    """Dump until ``pred(snapshot)`` holds (the ranks may still be importing torch)."""
    deadline = time.monotonic() + timeout
    while True:
        snap = stacks_json("--session", sid)
        if pred(snap):
            return snap
        if time.monotonic() > deadline:
            raise AssertionError(f"stacks never matched: {json.dumps(snap)[:3000]}")
        time.sleep(0.5)


def tops(snap: dict) -> dict[int, str]:
    return {r: g["frames"][0]["function"] for g in snap["groups"] for r in g["ranks"]}


def hung(snap: dict) -> bool:
    return tops(snap) == {0: "all_reduce", 1: "barrier"}


def test_hang_example_two_groups_then_sigstop_is_unresponsive(job, registry_dir, port_base):
    j = job("torchrun", "--debug-port-base", str(port_base), "--nproc-per-node", "2", str(HANG))
    sid = j.session_id()
    ranks = wait_ranks(registry_dir, sid, 2)
    for entry in ranks.values():  # the rank entry says how to dump it, in the shared schema
        jsonschema.validate(entry, json.loads(SCHEMA_PATH.read_text()))
        assert entry["stacks"]["file"] == f"stacks-{entry['rank']}.txt" and entry["stacks"]["signal"] == SIGNAL
    snap = wait_groups(sid, hung)
    assert snap["session_id"] == sid and snap["unresponsive"] == []
    assert [g["ranks"] for g in snap["groups"]] == [[0], [1]]
    reduce_line, barrier_line = marker_line(HANG, "hang all_reduce"), marker_line(HANG, "hang barrier")
    g0, g1 = snap["groups"]
    user0 = [(f["function"], f["line"]) for f in g0["frames"] if f["file"] == str(HANG)]
    user1 = [(f["function"], f["line"]) for f in g1["frames"] if f["file"] == str(HANG)]
    assert user0[0] == ("train_step", reduce_line) and user1[0] == ("evaluate", barrier_line)
    assert user0[1] == ("main", marker_line(HANG, "hang skipped step"))
    # rank 1 departs from the majority where main() called evaluate() instead of train_step()
    assert g0["departs_at"] is None
    d = g1["frames"][g1["departs_at"]]
    assert (d["function"], d["line"]) == ("main", marker_line(HANG, "hang evaluate"))
    assert any(t["main"] for t in g0["threads"]) and len(g0["threads"]) >= 2  # the endpoint's thread too

    text = rtdebug("stacks", "--session", sid)
    assert text.returncode == 0, text.stderr
    assert f"rank 0: all_reduce {ARROW} train_step (hang.py:{reduce_line})" in text.stdout
    assert f"rank 1: barrier {ARROW} evaluate (hang.py:{barrier_line})" in text.stdout
    # the collective records say where each rank waits, first; one against one, they cannot say which
    # rank skipped (with --skip-rank 0 the picture is the same, mirrored), so nobody is named
    assert snap["culprit"] is None
    assert snap["verdict"] == (
        f"ranks are blocked in different collectives: rank 0 in ALLREDUCE #4 (hang.py:{reduce_line}); "
        f"rank 1 in BARRIER #4 (hang.py:{barrier_line})"
    )
    assert text.stdout.splitlines()[0] == snap["verdict"]
    # from the Flight Recorder (every collective; a Python-level one keeps the record's call site)
    python = {"pg": "0", "issued": "python", "by": None, "during": None}
    assert g0["collectives"] == [
        {"rank": 0, "op": "ALLREDUCE", "seq": 4, "state": "entered", "file": str(HANG), "line": reduce_line} | python
    ]
    assert g1["collectives"] == [
        {"rank": 1, "op": "BARRIER", "seq": 4, "state": "entered", "file": str(HANG), "line": barrier_line} | python
    ]

    one = stacks_json("--session", sid, "--rank", "1")
    assert [g["ranks"] for g in one["groups"]] == [[1]]

    if find_py_spy() is not None:
        native = stacks_json("--session", sid, "--native", "--rank", "0")
        frames = native["groups"][0]["native"]["0"]
        assert isinstance(frames, list), frames
        main = next(t for t in frames if t["main"])
        assert any(".so" in (f["file"] or "") for f in main["frames"])  # a native frame below all_reduce
        assert any(f["function"] == "train_step" for f in main["frames"])

    pid1 = ranks[1]["pid"]
    os.kill(pid1, signal.SIGSTOP)
    try:  # a stopped rank is named at once, never waited for: here its timeout is far past the deadline
        # (how long the answer takes is measured by bench/probes/stacks_bench.py, section 1)
        stopped = finishes(
            lambda: stacks_json("--session", sid, "--timeout", "300"), 60, "stacks with rank 1 SIGSTOPped"
        )
    finally:
        os.kill(pid1, signal.SIGCONT)
    assert stopped["unresponsive"] == [1]
    assert [g["ranks"] for g in stopped["groups"]] == [[0]]
    assert "stopped" in stopped["unresponsive_detail"][0]["reason"]
    # it answers again once continued
    wait_groups(sid, hung, timeout=30)


def test_failing_rank_reports_where_the_others_are(job, port_base):
    """Also with the no-progress sampling off (--hang-report 0): a failure always reports."""
    script = SCRIPTS / "stacks_crash.py"
    j = job("torchrun", "--debug-port-base", str(port_base), "--hang-report", "0", "--nproc-per-node", "2", str(script))
    assert j.wait(240) != 0
    out = j.output()
    assert "rtdebug: no rank's stack has changed" not in out
    assert "rtdebug: rank 1 (ZeroDivisionError: bad batch in rank 1) failed; where the other ranks are:" in out, out[
        -4000:
    ]
    line = marker_line(script, "crash all_reduce")
    report = out.split("where the other ranks are:", 1)[1]
    assert f"rank 0: all_reduce {ARROW} step (stacks_crash.py:{line})" in report


def test_no_progress_report_before_the_pg_timeout_kills_the_job(job, port_base):
    j = job("torchrun", "--debug-port-base", str(port_base), "--pg-timeout", "16", "--nproc-per-node", "2", str(HANG))
    assert j.wait(240) != 0
    out = j.output()
    assert "rtdebug: no rank's stack has changed for " in out, out[-4000:]
    report = out.split("rtdebug: no rank's stack has changed for ", 1)[1]
    assert report.index("where every rank is:") < report.index("Timed out")  # written before the timeout hit
    assert f"rank 0: all_reduce {ARROW} train_step (hang.py:{marker_line(HANG, 'hang all_reduce')})" in report
    assert f"rank 1: barrier {ARROW} evaluate (hang.py:{marker_line(HANG, 'hang barrier')})" in report


def test_check_collectives_names_the_mismatch_in_one_line(job, port_base):
    j = job("torchrun", "--debug-port-base", str(port_base), "--check-collectives", "--nproc-per-node", "2", str(HANG))
    assert j.wait(240) != 0
    out = j.output()
    reduce_line, barrier_line = marker_line(HANG, "hang all_reduce"), marker_line(HANG, "hang barrier")
    assert (
        f"rtdebug: rank 0: collective mismatch (--check-collectives): rank 0 called ALLREDUCE #3 [4] Float "
        f"at hang.py:{reduce_line} (train_step), rank 1 "
    ) in out, out[-4000:]
    assert (
        f"rtdebug: rank 1: collective mismatch (--check-collectives): rank 1 called BARRIER #3 "
        f"at hang.py:{barrier_line} (evaluate), rank 0 "
    ) in out
    assert "Detected mismatch between collectives" not in out  # torch's paragraph is replaced by the line


def read_count(path) -> int:
    try:
        return int(path.read_text().strip() or 0)
    except (OSError, ValueError):
        return 0


def test_run_rank_keeps_stepping_while_dumped(job, registry_dir, port_base, tmp_path):
    """`rtdebug run` (one rank): each dump shows the loop, and the step counter advances across dumps."""
    counter = tmp_path / "steps"
    j = job("run", "--port", str(port_base), str(SCRIPTS / "stacks_stepper.py"), str(counter))
    sid = j.session_id()
    wait_ranks(registry_dir, sid, 1)
    counts = [until(lambda: read_count(counter), 60, "the stepper's first step")]
    for _ in range(4):
        snap = stacks_json("--session", sid, "--timeout", "5")
        assert snap["unresponsive"] == [] and [g["ranks"] for g in snap["groups"]] == [[0]]
        g = snap["groups"][0]
        assert g["frames"][0]["function"] in ("step", "<module>")
        assert any(f["function"] == "idle_helper" for t in g["threads"] if not t["main"] for f in t["frames"])
        counts.append(until(lambda: read_count(counter), 60, "a step after the dump", ok=lambda n: n > counts[-1]))
    assert counts[0] > 0 and all(b > a for a, b in zip(counts, counts[1:], strict=False)), counts

    bad = rtdebug("stacks", "--session", sid, "--rank", "3")
    assert bad.returncode == 2 and "rtdebug: error: invalid --rank value '3': rank 3 >= world size 1" in bad.stderr
    bad = rtdebug("stacks", "--session", sid, "--timeout", "0")
    assert bad.returncode == 2 and "rtdebug: error: --timeout must be > 0 seconds" in bad.stderr


def start_stepper(job, registry_dir, port_base, tmp_path, *flags):
    j = job("run", "--port", str(port_base), str(SCRIPTS / "stacks_stepper.py"), str(tmp_path / "n"), *flags)
    sid = j.session_id()
    wait_ranks(registry_dir, sid, 1)
    want = -1 if "--hold-gil" in flags else 1
    deadline = time.monotonic() + 60
    while read_count(tmp_path / "n") < 1 if want == 1 else read_count(tmp_path / "n") != -1:
        assert time.monotonic() < deadline, "the stepper never got going"
        time.sleep(0.1)
    return sid


def test_rank_whose_program_took_the_signal_still_answers_from_its_dump_thread(job, registry_dir, port_base, tmp_path):
    """The dump thread needs no signal: a program that owns the fallback's signal is dumped all the same,
    with its threads' names."""
    sid = start_stepper(job, registry_dir, port_base, tmp_path, "--take-signal")
    snap = stacks_json("--session", sid, "--timeout", "5")
    assert snap["unresponsive"] == [] and snap["fallback"] == [] and [g["ranks"] for g in snap["groups"]] == [[0]]
    names = {t.get("name") for t in snap["groups"][0]["threads"]}
    assert {"MainThread", "helper", "rtdebug-dumps-0"} <= names, names


def test_a_rank_holding_its_gil_gets_the_signal_fallback_named_as_such(job, registry_dir, port_base, tmp_path):
    """A C call that keeps the GIL: the dump thread cannot run, so the signal-time dump answers, and the
    output says it was the fallback."""
    sid = start_stepper(job, registry_dir, port_base, tmp_path, "--hold-gil")
    snap = stacks_json("--session", sid, "--timeout", "4")
    assert snap["unresponsive"] == [] and [g["ranks"] for g in snap["groups"]] == [[0]]
    assert snap["fallback"] == [{"rank": 0, "reason": "its dump thread did not answer within 1.5 s"}]
    assert snap["groups"][0]["frames"][0]["function"] == "match"  # re.match, whose C loop holds the GIL
    text = rtdebug("stacks", "--session", sid, "--timeout", "4").stdout
    assert "rank 0: signal-time dump (fallback: its dump thread did not answer within 1.5 s" in text


def test_rank_that_holds_its_gil_and_took_the_signal_is_unresponsive_after_timeout(
    job, registry_dir, port_base, tmp_path
):
    sid = start_stepper(job, registry_dir, port_base, tmp_path, "--take-signal", "--hold-gil")
    snap = stacks_json("--session", sid, "--timeout", "3")
    assert snap["unresponsive"] == [0] and snap["groups"] == []
    assert snap["unresponsive_detail"][0]["reason"] == "no answer within 3 s"


def test_no_session_is_one_line(registry_dir):
    out = rtdebug("stacks")
    assert out.returncode == 1 and out.stderr.startswith("rtdebug: error: no live rtdebug session")


def test_rank_stopped_at_a_breakpoint_is_dumped(job, registry_dir, port_base):
    """Also: while a client is attached, standing still is no hang (--hang-report 2 stays quiet)."""
    script = SCRIPTS / "stacks_breakpoint.py"
    line = marker_line(script, "stacks bp")
    j = job(
        "torchrun",
        "--debug-port-base",
        str(port_base),
        "--wait",
        "1",
        "--hang-report",
        "2",
        "--nproc-per-node",
        "2",
        str(script),
    )
    sid = j.session_id()
    wait_ranks(registry_dir, sid, 2)
    c = DAPClient("127.0.0.1", port_base + 1)
    try:
        c.attach({str(script): [line]})
        stopped = c.wait_stopped(120)
        assert c.top_frame(stopped["threadId"])["line"] == line
        snap = wait_groups(sid, lambda s: tops(s) == {0: "barrier", 1: "work"})
        g1 = next(g for g in snap["groups"] if g["ranks"] == [1])
        assert (g1["frames"][0]["file"], g1["frames"][0]["line"]) == (str(script), line)
        assert g1["debugger"] is True and g1["label"].endswith("[stopped in the debugger]")
        main = next(t for t in g1["threads"] if t["main"])
        assert any("pydevd" in f["file"] for f in main["frames"])  # kept, just not in the group's key
        # > 2 s of identical stacks: a report would be due, were no client attached (a window in which it would show)
        stays(
            lambda: "rtdebug: no rank's stack has changed" not in j.output(),
            5,
            "no hang report while a client is attached",
        )
        c.request("setBreakpoints", source={"path": str(script)}, breakpoints=[])
        c.continue_(stopped["threadId"])
    finally:
        c.disconnect()
    assert j.wait(120) == 0, j.output()[-3000:]


def test_bad_hang_report_is_a_usage_error(registry_dir):
    out = rtdebug("torchrun", "--hang-report", "-1", "--nproc-per-node", "1", str(HANG))
    assert out.returncode == 2, out.stderr
    assert out.stderr.strip() == "rtdebug: error: --hang-report must be >= 0 seconds (0 = off), got -1"
    assert not any(registry_dir.glob("*/session.json"))  # nothing was started or registered
