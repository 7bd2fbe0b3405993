"""Bad capsules and bad replay/capture requests, end to end through the CLI: one line each, the right exit
code, nothing left running or registered. The capsule is a real one, captured once per module from a 2-rank
gloo job (``tests/scripts/replay_shell_job.py``), then copied and damaged per case."""

from __future__ import annotations

import json
import os
import pickle
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

from support.jobs import rtdebug
from support.paths import SCRIPTS
from support.ports import free_port_base

pytestmark = pytest.mark.e2e
JOB = SCRIPTS / "replay_shell_job.py"


def one_line_error(r: subprocess.CompletedProcess, code: int, text: str) -> str:
    assert r.returncode == code, (r.returncode, r.stdout, r.stderr)
    lines = [line for line in r.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("rtdebug: error: ") and text in lines[0], r.stderr
    return lines[0]


def no_sessions(registry_dir: Path) -> None:
    """Nothing was registered, not even an ended session: the refusal came before the launcher began."""
    assert not registry_dir.exists() or not [p for p in registry_dir.iterdir() if p.is_dir()], list(
        registry_dir.iterdir()
    )


def capture(where: Path, registry: Path, *extra: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    first = free_port_base(5)  # debug ports first, first + 1; the store: not torchrun's 29500 (a parallel job's)
    base, master = str(first), str(first + 4)
    args = ["torchrun", "--debug-port-base", base, "--master-addr", "127.0.0.1", "--master-port", master]
    args += ["--nproc-per-node", "2", "--capture", str(where), *extra, str(JOB)]
    return rtdebug(*args, env={"RTDEBUG_REGISTRY_DIR": str(registry), **(env or {})}, timeout=180)


@pytest.fixture(scope="module")
def captured(tmp_path_factory) -> Path:
    d = tmp_path_factory.mktemp("capsule")
    r = capture(d / "cap", d / "registry")
    assert r.returncode == 0, r.stdout + r.stderr
    assert (d / "cap" / "rank-1").is_dir(), r.stdout + r.stderr
    return d / "cap"


@pytest.fixture
def capsule(captured, tmp_path) -> Path:
    """A copy of the module's capsule, this test's to damage."""
    return Path(shutil.copytree(captured, tmp_path / "cap"))


def _cut_index(c: Path) -> None:
    p = c / "rank-1" / "index.jsonl"
    p.write_bytes(p.read_bytes()[:-7])


def _garbage_manifest(c: Path) -> None:
    (c / "manifest.json").write_bytes(b'{"format": 1, "world_si')


def _set(path: Path, **fields) -> None:
    data = json.loads(path.read_text())
    data.update(fields)
    path.write_text(json.dumps(data))


def _shard(c: Path) -> Path:
    return sorted((c / "rank-1").glob("*.safetensors"))[0]


def _pickled_shard(c: Path) -> None:
    _shard(c).write_bytes(pickle.dumps({"weight": [1.0, 2.0]}, protocol=2))


def _torch_saved_shard(c: Path) -> None:
    import torch

    torch.save({"weight": torch.ones(2)}, _shard(c))


def _truncated_shard(c: Path) -> None:
    p = _shard(c)
    p.write_bytes(p.read_bytes()[:12])


DAMAGE: dict[str, tuple[Callable[[Path], None], str]] = {
    "index cut short": (_cut_index, "index.jsonl: its last line is cut short (truncated)"),
    "manifest garbage": (_garbage_manifest, "manifest.json: not valid JSON (truncated or corrupted)"),
    "manifest missing": (lambda c: (c / "manifest.json").unlink(), "is this a capsule made with --capture?"),
    "unknown format": (lambda c: _set(c / "manifest.json", format=99), "capsule format 99 is not one this rtdebug"),
    "another world size": (lambda c: _set(c / "rank-1" / "rank.json", world_size=4), "world size 4 differs"),
    "a rank past the world": (lambda c: (c / "rank-1").rename(c / "rank-7"), "rank 7 in a capsule of world size 2"),
    "pickled tensor file": (_pickled_shard, "would need unpickling: refused"),
    "torch.save tensor file": (_torch_saved_shard, "would need unpickling: refused"),
    "tensor file cut short": (_truncated_shard, "not a valid safetensors file"),
    "tensor file missing": (lambda c: _shard(c).unlink(), "missing (the index names it)"),
}


@pytest.mark.parametrize("case", list(DAMAGE))
def test_a_damaged_capsule_is_one_line_before_anything_starts(case, capsule, tmp_path):
    damage, text = DAMAGE[case]
    damage(capsule)
    registry = tmp_path / "registry"
    env = {"RTDEBUG_REGISTRY_DIR": str(registry)}
    port = str(free_port_base(1))
    one_line_error(rtdebug("replay", str(capsule), "--rank", "1", "--port", port, env=env), 1, text)
    if case in ("index cut short", "pickled tensor file"):  # the same reader: `capsule` says the same line
        one_line_error(rtdebug("capsule", str(capsule), env=env), 1, text)
    assert not (capsule / "scratch").exists()  # nothing was prepared, nothing registered
    no_sessions(registry)


def test_rank_out_of_range_or_not_captured(capsule, tmp_path):
    env = {"RTDEBUG_REGISTRY_DIR": str(tmp_path / "registry")}
    r = rtdebug("replay", str(capsule), "--rank", "5", env=env)
    one_line_error(r, 1, "--rank 5 is out of range: the job had ranks 0-1")
    shutil.rmtree(capsule / "rank-0")
    r = rtdebug("replay", str(capsule), "--rank", "0", env=env)
    one_line_error(r, 1, f"rank 0 was not captured: {capsule} holds rank 1")
    info = json.loads(rtdebug("capsule", str(capsule), "--json", env=env).stdout)
    assert [x["rank"] for x in info["ranks"]] == [1] and info["missing_ranks"] == [0]
    assert "not captured: rank 0\n" in rtdebug("capsule", str(capsule), env=env).stdout
    no_sessions(tmp_path / "registry")


@pytest.mark.parametrize(
    "args, text",
    [
        ([], "replay: which rank? give --rank R"),
        (["--rank", "-1"], "--rank -1 is out of range: ranks are >= 0"),
        (["--rank", "1", "--json"], "replay: --json goes with --info"),
        (["--rank", "1", "--no-check", "--check-tolerance", "0.1"], "--check-tolerance means nothing with --no-check"),
        (["--rank", "1", "--stop-at-collective", "0"], "--stop-at-collective must be >= 1"),
        (["--rank", "1", "--check-tolerance", "-1"], "--check-tolerance must be a number >= 0"),
        (["--rank", "1", "--script", "/no/such/train.py"], "--script /no/such/train.py: not found"),
    ],
)
def test_replay_usage_mistakes(args, text, capsule, tmp_path):
    r = rtdebug("replay", str(capsule), *args, env={"RTDEBUG_REGISTRY_DIR": str(tmp_path / "registry")})
    one_line_error(r, 2, text)
    no_sessions(tmp_path / "registry")


def test_not_a_capsule(tmp_path):
    r = rtdebug("replay", str(tmp_path / "nothing"), "--rank", "0")
    one_line_error(r, 1, "not a directory (a capsule is the folder --capture wrote)")
    r = rtdebug("capsule", str(tmp_path))
    one_line_error(r, 1, "manifest.json: missing")


def test_the_captured_script_gone(capsule, tmp_path):
    _set(capsule / "manifest.json", script=str(tmp_path / "moved.py"))
    r = rtdebug("replay", str(capsule), "--rank", "1", env={"RTDEBUG_REGISTRY_DIR": str(tmp_path / "registry")})
    one_line_error(r, 1, f"the captured script {tmp_path / 'moved.py'} is not here; give --script PATH")
    info = json.loads(rtdebug("capsule", str(capsule), "--json").stdout)
    assert info["script_today"]["state"] == "missing"


def test_a_capture_is_never_written_over(captured, tmp_path):
    registry = tmp_path / "registry"
    before = sorted(p.name for p in (captured / "rank-0").iterdir())
    r = capture(captured, registry)
    one_line_error(r, 2, f"--capture {captured}: it already holds a capture of rank 0; pick a new folder")
    assert sorted(p.name for p in (captured / "rank-0").iterdir()) == before
    no_sessions(registry)


def test_capture_max_gb_closes_the_capsule_and_the_job_runs_on(tmp_path):
    """20 bytes: the first all_reduce fits, the object broadcast does not (one process: ``rtdebug run``)."""
    env = {"RTDEBUG_REGISTRY_DIR": str(tmp_path / "registry")}
    cap, script = tmp_path / "cap", SCRIPTS / "replay_single.py"
    args = ["run", "--port", str(free_port_base(1)), "--capture", str(cap), "--capture-max-gb", "0.00000002"]
    r = rtdebug(*args, str(script), env=env)
    assert r.returncode == 0 and "single sum 6.0 objects" in r.stdout, r.stdout + r.stderr  # the job ran on
    info = json.loads(rtdebug("capsule", str(cap), "--json").stdout)
    (x,) = info["ranks"]
    assert x["closed"] and x["complete_upto"] == 1 == x["collectives"], x
    assert x["end_reason"] == "capture-max-gb reached before collective #2", x
    text = rtdebug("capsule", str(cap)).stdout
    assert "closed after #1: capture-max-gb reached before collective #2" in text, text
    r = rtdebug("replay", str(cap), "--rank", "0", "--port", str(free_port_base(1)), env=env)
    assert r.returncode == 1 and "capture ends at collective #1" in r.stderr, r.stdout + r.stderr


@pytest.mark.skipif(os.geteuid() != 0, reason="mounts a small tmpfs (root)")
@pytest.mark.skipif(os.environ.get("RTDEBUG_FULL") != "1", reason="RTDEBUG_FULL=1: a capture onto a 96 KB tmpfs")
def test_a_full_disk_closes_the_capsule_and_the_job_runs_on(tmp_path):
    mnt = tmp_path / "small"
    mnt.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=96k", "tmpfs", str(mnt)], check=True)
    try:
        r = capture(mnt / "cap", tmp_path / "registry", env={"PAYLOAD": "8192", "STEPS": "6"})
        assert r.returncode == 0, r.stdout + r.stderr
        assert "rank 1 done" in r.stdout and "rank 0 done" in r.stdout
        info = json.loads(rtdebug("capsule", str(mnt / "cap"), "--json").stdout)
        # marked incomplete: closed by the full disk ("disk: ..."), or left open when not even end.json fitted
        assert [x["end_reason"] for x in info["ranks"]] != ["ended", "ended"], info
        full = [x for x in info["ranks"] if x["end_reason"] != "ended"]
        assert all(x["end_reason"].startswith("disk: ") or not x["closed"] for x in full), info
        text = rtdebug("capsule", str(mnt / "cap")).stdout
        assert "open: up to #" in text or ": disk: " in text, text
    finally:
        subprocess.run(["umount", "-l", str(mnt)], check=False)


def test_more_collectives_than_captured_is_one_line_and_exit_1(capsule, tmp_path):
    registry = tmp_path / "registry"
    port = free_port_base(1)
    env = {"RTDEBUG_REGISTRY_DIR": str(registry), "EXTRA": "1"}  # one all_reduce more than the job made
    r = rtdebug("replay", str(capsule), "--rank", "0", "--port", str(port), env=env)
    assert r.returncode == 1, (r.stdout, r.stderr)
    ends = [line for line in r.stderr.splitlines() if "capture ends at collective #" in line]
    assert len(ends) == 1 and ends[0].startswith("rtdebug: replay of rank 0"), r.stderr
    assert "replay_shell_job.py:" in ends[0] and "Traceback" not in r.stderr, r.stderr
    assert "rank 0 step 2 loss" in r.stdout  # what the capture holds was served first
    (sid,) = [p.name for p in registry.iterdir() if p.is_dir()]
    ended = json.loads(rtdebug("ps", "--json", "--all", env={"RTDEBUG_REGISTRY_DIR": str(registry)}).stdout)["ended"]
    assert [(s["session_id"], s["state"], s["mode"]) for s in ended] == [(sid, "failed", "replay")]


def test_a_manifest_with_terminal_escapes_prints_them_escaped(capsule, tmp_path):
    """A capsule is input: its strings reach the terminal as escapes, never as control sequences."""
    _set(capsule / "manifest.json", script="\x1b[2J/job/evil.py", argv=["\x1b]0;owned\x07", "--lr"], cwd="\r/job")
    r = rtdebug("capsule", str(capsule))
    assert r.returncode == 0, r.stderr
    assert "\x1b" not in r.stdout and "\x07" not in r.stdout and "\r" not in r.stdout, r.stdout
    assert "script \\x1b[2J/job/evil.py \\x1b]0;owned\\x07 --lr; cwd \\x0d/job" in r.stdout, r.stdout
    r = rtdebug("replay", str(capsule), "--rank", "1", env={"RTDEBUG_REGISTRY_DIR": str(tmp_path / "registry")})
    one_line_error(r, 1, "the captured script \\x1b[2J/job/evil.py is not here; give --script PATH")
    assert "\x1b" not in r.stderr
    no_sessions(tmp_path / "registry")


def test_the_scratch_folder_is_never_a_link_nor_someone_elses(capsule, tmp_path):
    """The replay empties ``DIR/scratch/rank-R`` at start: only a folder it made (its marker inside), never
    through a link a capsule brought along."""
    env = {"RTDEBUG_REGISTRY_DIR": str(tmp_path / "registry")}
    precious = tmp_path / "precious"
    (precious / "rank-1").mkdir(parents=True)
    (precious / "rank-1" / "keep.txt").write_text("mine")
    (capsule / "scratch").symlink_to(precious)
    r = rtdebug("replay", str(capsule), "--rank", "1", "--port", str(free_port_base(1)), env=env)
    one_line_error(r, 2, f"cannot prepare the replay: {capsule / 'scratch'} is not a folder rtdebug made")
    (capsule / "scratch").unlink()
    (capsule / "scratch" / "rank-1").mkdir(parents=True)
    (capsule / "scratch" / "rank-1" / "notes.txt").write_text("mine too")
    r = rtdebug("replay", str(capsule), "--rank", "1", "--port", str(free_port_base(1)), env=env)
    one_line_error(r, 2, f"{capsule / 'scratch' / 'rank-1'} is not a folder rtdebug made; move it away")
    assert (precious / "rank-1" / "keep.txt").read_text() == "mine"
    assert (capsule / "scratch" / "rank-1" / "notes.txt").read_text() == "mine too"
    no_sessions(tmp_path / "registry")
