"""Forged capsules: files that are not files, folders that lie about their rank, records of the wrong type, a
world size no job had, and a rank's environment that names variables a capture never records. Each is one
line from ``rtdebug capsule`` (the same reader as ``rtdebug replay``), never a hang, a traceback or a variable
set in the replay. The capsule is a real one, captured once per module from a 2-rank gloo job."""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest

from support.jobs import rtdebug
from support.paths import SCRIPTS
from support.ports import free_port_base

pytestmark = pytest.mark.e2e
JOB = SCRIPTS / "replay_shell_job.py"


@pytest.fixture(scope="module")
def captured(tmp_path_factory) -> Path:
    d = tmp_path_factory.mktemp("capsule")
    first = free_port_base(5)
    args = ["torchrun", "--debug-port-base", str(first), "--master-addr", "127.0.0.1", "--master-port"]
    args += [str(first + 4), "--nproc-per-node", "2", "--capture", str(d / "cap"), str(JOB)]
    r = rtdebug(*args, env={"RTDEBUG_REGISTRY_DIR": str(d / "registry")}, timeout=180)
    assert r.returncode == 0 and (d / "cap" / "rank-1" / "end.json").is_file(), r.stdout + r.stderr
    return d / "cap"


@pytest.fixture
def capsule(captured, tmp_path) -> Path:
    return Path(shutil.copytree(captured, tmp_path / "cap"))


def _set(path: Path, **fields) -> None:
    data = json.loads(path.read_text())
    data.update(fields)
    path.write_text(json.dumps(data))


def _replace(path: Path, make: Callable[[Path], None]) -> None:
    path.unlink()
    make(path)


def _first_coll(c: Path, **fields) -> None:
    p = c / "rank-1" / "index.jsonl"
    records = [json.loads(line) for line in p.read_text().splitlines()]
    next(r for r in records if r["kind"] == "coll").update(fields)
    p.write_text("".join(json.dumps(r) + "\n" for r in records))


def _shard(c: Path) -> Path:
    return sorted((c / "rank-1").glob("*.safetensors"))[0]


FORGED: dict[str, tuple[Callable[[Path], None], str]] = {
    "manifest a link to /dev/zero": (
        lambda c: _replace(c / "manifest.json", lambda p: os.symlink("/dev/zero", p)),
        "manifest.json: not a regular file",
    ),
    "manifest a 300 MB sparse file": (
        lambda c: os.truncate(c / "manifest.json", 300 << 20),
        "manifest.json: larger than any file --capture writes (corrupted)",
    ),
    "index a FIFO": (
        lambda c: _replace(c / "rank-1" / "index.jsonl", os.mkfifo),
        "rank-1/index.jsonl: not a regular file",
    ),
    "tensor file a FIFO": (lambda c: _replace(_shard(c), os.mkfifo), ".safetensors: not a regular file"),
    "rank folder a link to another rank": (
        lambda c: (shutil.rmtree(c / "rank-1"), os.symlink(c / "rank-0", c / "rank-1")),
        "rank-1/rank.json: holds rank 0, not 1 (a copied or linked folder?)",
    ),
    "out not a list": (lambda c: _first_coll(c, out=5), "index.jsonl:2: its in/out are not lists of tensors"),
    "in a string": (lambda c: _first_coll(c, **{"in": "x"}), "index.jsonl:2: its in/out are not lists of tensors"),
    "n is true": (lambda c: _first_coll(c, n=True), "index.jsonl:2: collective #True where #1 was due"),
    "end before the start": (
        lambda c: _set(c / "rank-1" / "end.json", complete_upto=-5),
        "end.json: says complete up to #-5 but the index ends at #",
    ),
    "a world of 10**12": (
        lambda c: _set(c / "manifest.json", world_size=10**12),
        "manifest.json: no valid world_size (corrupted)",
    ),
}


@pytest.mark.parametrize("case", list(FORGED))
def test_a_forged_capsule_is_one_line(case, capsule, tmp_path):
    forge, text = FORGED[case]
    forge(capsule)
    r = rtdebug("capsule", str(capsule), env={"RTDEBUG_REGISTRY_DIR": str(tmp_path / "registry")}, timeout=60)
    assert r.returncode == 1, (r.returncode, r.stdout, r.stderr)
    lines = [line for line in r.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("rtdebug: error: ") and text in lines[0], r.stderr


def test_argv_of_numbers_is_shown_not_a_traceback(capsule):
    _set(capsule / "manifest.json", argv=[7, "--lr", 0.5])
    r = rtdebug("capsule", str(capsule), timeout=60)
    assert r.returncode == 0 and r.stderr == "", r.stderr
    assert "replay_shell_job.py 7 --lr 0.5; cwd " in r.stdout, r.stdout


def test_a_capsule_sets_only_the_ranks_variables(capsule, tmp_path):
    """rank.json's env naming LD_PRELOAD or a variable of its own: the replay sets neither; RANK and
    WORLD_SIZE are the capsule's own even when the env leaves them out or holds a NUL."""
    info = json.loads((capsule / "rank-1" / "rank.json").read_text())
    env = {k: v for k, v in info["env"].items() if k not in ("RANK", "WORLD_SIZE")}
    env.update(LD_PRELOAD=str(tmp_path / "evil.so"), RTDEBUG_FORGED="set", LOCAL_RANK="1\x00")
    _set(capsule / "rank-1" / "rank.json", env=env)
    probe = tmp_path / "probe.py"
    keys = ("LD_PRELOAD", "RTDEBUG_FORGED", "LOCAL_RANK", "RANK", "WORLD_SIZE")
    probe.write_text(f"import os\nprint('PROBE', [os.environ.get(k) for k in {keys!r}])\n")
    port = str(free_port_base(1))
    env_run = {"RTDEBUG_REGISTRY_DIR": str(tmp_path / "registry"), "LD_PRELOAD": "", "RTDEBUG_FORGED": ""}
    r = rtdebug("replay", str(capsule), "--rank", "1", "--port", port, "--script", str(probe), env=env_run)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "PROBE ['', '', None, '1', '2']" in r.stdout, r.stdout + r.stderr


@pytest.mark.parametrize("cmd", ["torchrun", "run"])
def test_an_empty_capture_folder_is_a_usage_error_not_a_job_without_capture(cmd, tmp_path):
    registry = tmp_path / "registry"
    extra = ["--nproc-per-node", "2"] if cmd == "torchrun" else []
    r = rtdebug(cmd, *extra, "--capture=", str(JOB), env={"RTDEBUG_REGISTRY_DIR": str(registry)}, timeout=60)
    assert r.returncode == 2, (r.returncode, r.stdout, r.stderr)
    assert (
        r.stderr
        == f"rtdebug: error: argument --capture: needs a folder, got an empty name (see 'rtdebug {cmd} --help')\n"
    )
    assert not registry.exists() or not any(registry.iterdir())


def test_a_rank_killed_mid_line_ends_at_its_last_complete_line(capsule):
    """No end.json (the rank was killed) and the index's last line cut short: the capture ends at the last
    complete line, as docs/replay.md says; with end.json there the same cut is damage (test_replay_bad)."""
    (capsule / "rank-1" / "end.json").unlink()
    p = capsule / "rank-1" / "index.jsonl"
    lines = p.read_bytes().splitlines(keepends=True)
    p.write_bytes(b"".join(lines[:-1]) + lines[-1][:-7])
    whole = [json.loads(line) for line in lines[:-1]]
    upto = max(r["n"] for r in whole if r["kind"] == "coll")
    r = rtdebug("capsule", str(capsule), "--json", timeout=60)
    assert r.returncode == 0, r.stderr
    rank1 = next(x for x in json.loads(r.stdout)["ranks"] if x["rank"] == 1)
    assert (rank1["complete_upto"], rank1["closed"]) == (upto, False), rank1


def test_a_replay_prints_the_manifests_device_escaped(capsule, tmp_path):
    _set(capsule / "manifest.json", device="cuda\x1b]0;owned\x07\x1b[31m")
    env = {"RTDEBUG_REGISTRY_DIR": str(tmp_path / "registry")}
    r = rtdebug("replay", str(capsule), "--rank", "1", "--port", str(free_port_base(1)), "--no-check", env=env)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "\x1b" not in r.stderr and "\x07" not in r.stderr, r.stderr
    r = rtdebug("replay", str(capsule), "--rank", "1", "--port", str(free_port_base(1)), env=env)
    assert "rtdebug: a cuda\\x1b]0;owned\\x07\\x1b[31m capture: where the script runs on CPU here" in r.stderr, r.stderr


def test_a_capture_folder_with_a_dangling_link_for_a_rank_is_refused(tmp_path):
    """Someone else's shared folder where rank-1 is a link to nowhere: refused before anything starts, as a
    folder holding rank 1's capture is; nothing is made where the link points."""
    where = tmp_path / "shared"
    where.mkdir()
    (where / "rank-1").symlink_to(tmp_path / "elsewhere")
    registry = tmp_path / "registry"
    argv = ["torchrun", "--nproc-per-node", "2", "--capture", str(where), str(JOB)]
    r = rtdebug(*argv, env={"RTDEBUG_REGISTRY_DIR": str(registry)}, timeout=60)
    assert r.returncode == 2, (r.returncode, r.stdout, r.stderr)
    assert r.stderr == f"rtdebug: error: --capture {where}: it already holds a capture of rank 1; pick a new folder\n"
    assert not (tmp_path / "elsewhere").exists() and not (where / "rank-0").exists()
