"""``rtdebug replay`` and ``rtdebug capsule`` through the CLI, on a real capsule (a 2-rank gloo job captured once
per module): a replayed rank prints what it printed in the job; a replay is a session of its own in ``ps``
(mode replay, its capsule and rank) and ends by ``stop``; ``--info`` and ``capsule --json`` agree; an edited
script is said at start. The bit-for-bit and divergence proofs are ``test_replay.py``'s."""

from __future__ import annotations

import json
import re
import shutil
import signal
from pathlib import Path

import pytest

from support.jobs import read_ranks, rtdebug, wait_ranks
from support.paths import EXAMPLES, ROOT, SCRIPTS
from support.ports import free_port_base, port_free
from support.wait import until

pytestmark = pytest.mark.e2e
JOB = SCRIPTS / "replay_shell_job.py"


@pytest.fixture(scope="module")
def captured(tmp_path_factory) -> tuple[Path, str]:
    """(the capsule, what the job printed)."""
    d = tmp_path_factory.mktemp("capsule")
    first = free_port_base(5)  # debug ports first, first + 1; the store: not torchrun's 29500 (a parallel job's)
    base, master = str(first), str(first + 4)
    args = ["torchrun", "--debug-port-base", base, "--master-addr", "127.0.0.1", "--master-port", master]
    args += ["--nproc-per-node", "2", "--capture", str(d / "cap"), str(JOB)]
    r = rtdebug(*args, env={"RTDEBUG_REGISTRY_DIR": str(d / "registry")}, timeout=180)
    assert r.returncode == 0, r.stdout + r.stderr
    return d / "cap", r.stdout


def lines_of(out: str, rank: int) -> list[str]:
    """The rank's own lines (two ranks' prints may share a line of the job's output)."""
    return re.findall(rf"rank {rank} (?:step \d+ loss \d+\.\d{{8}}|done)", out)


def test_a_replayed_rank_prints_what_it_printed_in_the_job(captured, tmp_path, port_base):
    cap, job_out = captured
    assert len(lines_of(job_out, 1)) == 4  # 3 steps and "done"
    env = {"RTDEBUG_REGISTRY_DIR": str(tmp_path / "registry")}
    r = rtdebug("replay", str(cap), "--rank", "1", "--port", str(port_base), env=env, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    assert lines_of(r.stdout, 1) == lines_of(job_out, 1) and not lines_of(r.stdout, 0)
    said = f"replay of rank 1 of 2 from {cap}: runs {JOB} in {ROOT}; checkpoints and Ray Train storage go under "
    assert said + f"{cap}/scratch/rank-1" in r.stderr  # the capsule chooses what runs, and where: said at start
    assert (cap / "scratch" / "rank-1" / ".rtdebug-scratch").is_file()
    assert port_free(port_base)


def test_a_replay_is_a_session_of_its_own_and_stop_ends_it(captured, job, registry_dir, port_base):
    cap, _ = captured
    j = job("replay", str(cap), "--rank", "1", "--wait", "--port", str(port_base))
    sid = j.session_id()
    rank = wait_ranks(registry_dir, sid, 1)[1]
    # a second replay of the same rank would empty the first's scratch folder: refused, the first's kept
    second = rtdebug("replay", str(cap), "--rank", "1", "--port", str(port_base + 1),
                     env={"RTDEBUG_REGISTRY_DIR": str(registry_dir)})  # fmt: skip
    assert second.returncode == 1 and second.stderr.splitlines()[-1] == (
        "rtdebug: error: another replay of rank 1 of this capsule is running: its scratch folder is in use"
    ), second.stderr
    assert (cap / "scratch" / "rank-1" / ".rtdebug-scratch").is_file()
    assert rank["world_size"] == 2 and rank["local_rank"] == 1 and rank["port"] == port_base and rank["wait"] is True
    sessions = json.loads(rtdebug("ps", "--json").stdout)["sessions"]
    (s,) = [x for x in sessions if x["session_id"] == sid]
    assert s["mode"] == "replay" and s["state"] == "running"
    assert s["replay"] == {"capsule": str(cap), "rank": 1, "world_size": 2, "scratch": str(cap / "scratch" / "rank-1")}
    assert f"replay of rank 1 (of 2) from {cap}" in rtdebug("ps").stdout
    r = rtdebug("stop", "--session", sid)
    assert r.returncode == 0, r.stdout + r.stderr
    assert j.wait(60) != 0
    until(lambda: port_free(port_base), 30, "the replay's debug port is free after stop")
    assert read_ranks(registry_dir, sid)[1]["state"] in ("exited", "failed")
    ended = json.loads(rtdebug("ps", "--json", "--all").stdout)["ended"]
    assert [x["state"] for x in ended if x["session_id"] == sid] == ["stopped"]


def test_info_and_capsule_agree_and_an_edited_script_is_said(captured, tmp_path, port_base):
    cap, _ = captured
    info = json.loads(rtdebug("capsule", str(cap), "--json").stdout)
    assert info == json.loads(rtdebug("replay", str(cap), "--info", "--json").stdout)
    assert info["world_size"] == 2 and info["script"] == str(JOB) and info["script_today"]["state"] == "same"
    assert [(x["rank"], x["end_reason"], x["complete_upto"] == x["collectives"] > 0) for x in info["ranks"]] == [
        (0, "ended", True),
        (1, "ended", True),
    ]
    text = rtdebug("capsule", str(cap)).stdout
    assert "today's file is the captured one" in text and f"complete (#1-#{info['ranks'][1]['collectives']})" in text
    edited = tmp_path / "edited.py"
    shutil.copy(JOB, edited)
    edited.write_text(edited.read_text() + "\n# edited after the capture\n")
    moved = json.loads(rtdebug("replay", str(cap), "--info", "--json", "--script", str(edited)).stdout)
    assert moved["script_today"]["state"] == "differs"
    env = {"RTDEBUG_REGISTRY_DIR": str(tmp_path / "registry")}
    r = rtdebug("replay", str(cap), "--rank", "0", "--script", str(edited), "--port", str(port_base), env=env)
    assert r.returncode == 0, r.stdout + r.stderr
    assert f"rtdebug: {edited} is not the captured script (sha256 differs)" in r.stderr


def test_rtdebug_run_captures_and_replays_its_one_rank(tmp_path, port_base):
    """``rtdebug run --capture``: the launcher's own process captures (the manifest's launch facts from ``run``);
    its replay prints the same line, the object broadcast included."""
    env = {"RTDEBUG_REGISTRY_DIR": str(tmp_path / "registry")}
    cap = tmp_path / "cap"
    job = rtdebug("run", "--port", str(port_base), "--capture", str(cap), str(SCRIPTS / "replay_single.py"), env=env)
    assert job.returncode == 0, job.stdout + job.stderr
    (line,) = [x for x in job.stdout.splitlines() if x.startswith("single sum ")]
    manifest = json.loads((cap / "manifest.json").read_text())
    assert manifest["world_size"] == 1 and manifest["script"] == str(SCRIPTS / "replay_single.py")
    r = rtdebug("replay", str(cap), "--rank", "0", "--port", str(port_base + 1), env=env)
    assert r.returncode == 0, r.stdout + r.stderr
    assert [x for x in r.stdout.splitlines() if x.startswith("single sum ")] == [line]
    assert "scratch: None" in job.stdout and f"scratch: {cap}/scratch/rank-0" in r.stdout  # the script sees it


def test_a_one_process_job_with_no_process_group_is_captured_and_replays_into_its_scratch(tmp_path, port_base):
    """Ray Train local mode in one process makes no process group: its capsule still gets a manifest (it was
    written only at the first group, so `capsule` refused it), and its replay's checkpoints go to the scratch
    folder, never where the job wrote."""
    env = {"RTDEBUG_REGISTRY_DIR": str(tmp_path / "registry")}
    cap, script, storage = tmp_path / "cap", str(EXAMPLES / "local_linear.py"), str(tmp_path / "storage")
    argv = ["--capture", str(cap), script, "--epochs", "1", "--storage", storage]
    job = rtdebug("run", "--port", str(port_base), *argv, env=env, timeout=180)
    assert job.returncode == 0, job.stdout + job.stderr
    info = rtdebug("capsule", str(cap), "--json", env=env)
    assert info.returncode == 0, info.stderr
    assert json.loads((cap / "manifest.json").read_text())["script"] == script
    r = rtdebug("replay", str(cap), "--rank", "0", "--port", str(port_base + 1), env=env, timeout=180)
    assert r.returncode == 0, r.stdout + r.stderr
    (final,) = [x for x in r.stdout.splitlines() if x.startswith("final checkpoint: ")]
    assert final.startswith(f"final checkpoint: {cap}/scratch/rank-0/"), final
    assert f"final checkpoint: {storage}/" in job.stdout  # the job's own, where the replay wrote nothing


def test_ctrl_c_during_a_capture_closes_it_as_interrupted_and_replay_says_so(job, tmp_path):
    """Ctrl-C to ``rtdebug torchrun --capture``: the teardown kills the ranks before they close their parts; the
    launcher closes them (``end.json``: interrupted), ``rtdebug capsule`` and ``rtdebug replay`` say so."""
    cap, first = tmp_path / "cap", free_port_base(5)
    args = ["torchrun", "--debug-port-base", str(first), "--master-addr", "127.0.0.1", "--master-port"]
    args += [str(first + 4), "--nproc-per-node", "2", "--capture", str(cap), str(JOB)]
    j = job(*args, env={"STEPS": "100000"})
    j.wait_output("rank 1 step 2 ")
    j.proc.send_signal(signal.SIGINT)
    j.wait()
    ends = {r: json.loads((cap / f"rank-{r}" / "end.json").read_text()) for r in (0, 1)}
    assert {e["reason"] for e in ends.values()} == {"interrupted (SIGINT)"}
    upto = ends[1]["complete_upto"]
    assert upto >= 3  # 3 steps of DDP's gradient bucket at least
    info = rtdebug("capsule", str(cap))
    assert f"closed after #{upto}: interrupted (SIGINT)" in info.stdout, info.stdout + info.stderr
    env = {"RTDEBUG_REGISTRY_DIR": str(tmp_path / "replays")}
    r = rtdebug("replay", str(cap), "--rank", "1", "--port", str(first + 2), env=env, timeout=120)  # 3 steps
    assert r.returncode == 0, r.stdout + r.stderr
    said = f"rtdebug: the captured job was interrupted (SIGINT): rank 1's capture holds collectives #1-#{upto}; "
    assert said + "a replay that goes further stops there" in r.stderr
