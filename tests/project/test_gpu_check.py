"""The GPU check (scripts/gpu-check.sh, scripts/gpu_check/) on CPU, so it cannot rot before a GPU machine is lent:
its fast failure where there is no GPU, its arguments, its results file and summary, the wheelhouse
scripts/gpu-bundle.sh builds, and every check's scripts run end to end on CPU with gloo (``--dry``)."""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
import zipfile
from pathlib import Path
from types import ModuleType

import psutil
import pytest

from support.paths import PY, ROOT

CHECK_SH = ROOT / "scripts" / "gpu-check.sh"
BUNDLE_SH = ROOT / "scripts" / "gpu-bundle.sh"


def _load(path: Path) -> ModuleType:
    """A module of the GPU check by its file (stdlib only), as the check itself imports it, under its own name."""
    spec = importlib.util.spec_from_file_location(f"gpu_check_{path.stem}", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


results = _load(ROOT / "scripts" / "gpu_check" / "results.py")

NAMES = ["install", "lazy_dap", "stop_on_nonfinite", "stacks_flight", "stacks_gloo_cuda", "pg_timeout",
         "post_mortem_oom", "adopt", "bench", "post_mortem_assert"]  # fmt: skip


def gpu_check(*args: str, env: dict[str, str] | None = None, timeout: float = 120) -> subprocess.CompletedProcess:
    e = dict(os.environ, GPU_CHECK_PYTHON=PY)
    e.update(env or {})
    return subprocess.run(["bash", str(CHECK_SH), *args], env=e, capture_output=True, text=True, timeout=timeout)


def _path_without_nvidia_smi(tmp_path: Path) -> str:
    dirs = [d for d in os.environ["PATH"].split(os.pathsep) if d and not (Path(d) / "nvidia-smi").exists()]
    return os.pathsep.join(dirs)


def _fake_nvidia_smi(tmp_path: Path) -> str:
    """A PATH whose nvidia-smi exists (and says nothing), so the check goes on to ask torch."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    smi = bin_dir / "nvidia-smi"
    smi.write_text("#!/bin/sh\nexit 0\n")
    smi.chmod(0o755)
    return f"{bin_dir}{os.pathsep}{_path_without_nvidia_smi(tmp_path)}"


def test_no_nvidia_smi_is_one_line_exit_2_and_writes_nothing(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    r = gpu_check(env={"OUT": str(out), "PATH": _path_without_nvidia_smi(tmp_path)})
    assert (r.returncode, r.stdout, r.stderr) == (2, "", "gpu-check: error: no CUDA GPU here (no nvidia-smi on PATH)\n")
    assert list(out.iterdir()) == []


def test_torch_without_cuda_is_one_line_exit_2(tmp_path):
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has a CUDA GPU")
    r = gpu_check(env={"OUT": str(tmp_path), "PATH": _fake_nvidia_smi(tmp_path)})
    want = f"gpu-check: error: no CUDA GPU here (torch {torch.__version__} sees no CUDA device)\n"
    assert (r.returncode, r.stdout, r.stderr) == (2, "", want)


def test_no_torch_is_one_line_exit_2(tmp_path):
    fake = tmp_path / "site"
    fake.mkdir()
    (fake / "torch.py").write_text("raise ImportError('no torch in this test')\n")
    r = gpu_check(env={"OUT": str(tmp_path), "PATH": _fake_nvidia_smi(tmp_path), "PYTHONPATH": str(fake)})
    assert r.returncode == 2 and r.stdout == "", r
    assert r.stderr == f"gpu-check: error: no CUDA GPU here (torch does not import in {PY}: ImportError: no torch in " \
                       "this test)\n"  # fmt: skip


def test_help_lists_the_options_and_exits_0():
    r = gpu_check("--help")
    assert r.returncode == 0 and r.stderr == "", r
    for flag in ("--out", "--only", "--list", "--dry", "--python", "--wheelhouse", "--budget", "--hold"):
        assert flag in r.stdout


def test_list_names_every_check_in_order():
    r = gpu_check("--list")
    assert r.returncode == 0, r
    assert [line.split()[0] for line in r.stdout.splitlines()] == NAMES


@pytest.mark.parametrize(
    "args, env, message",
    [
        (["--bogus"], {}, "unrecognized arguments: --bogus"),
        (["--only", "lazy_dap,nope"], {}, "--only: no check named nope (the checks: " + ",".join(NAMES) + ")"),
        (["--only", ","], {}, "--only: no check named ',' (the checks: " + ",".join(NAMES) + ")"),
        (["--hold", "0"], {}, "--hold must be a positive number of seconds"),
        (["--bench-rounds", "0"], {}, "--bench-rounds must be 1 or more"),
        (["--python", "/nonexistent/python3"], {}, "--python /nonexistent/python3: no such interpreter"),
        ([], {"OUT": ""}, "no output folder: set $OUT or pass --out DIR"),
        (
            ["--limit", "adopt"],
            {},
            "--limit adopt: want NAME=SECONDS with a check's name (the checks: " + ",".join(NAMES) + ")",
        ),
        (
            ["--limit", "x=3"],
            {},
            "--limit x=3: want NAME=SECONDS with a check's name (the checks: " + ",".join(NAMES) + ")",
        ),
    ],
)
def test_a_bad_argument_is_one_line_exit_2(args, env, message):
    r = gpu_check(*args, env={"OUT": "/tmp/unused", **env})
    assert (r.returncode, r.stdout, r.stderr) == (2, "", f"gpu-check: error: {message}\n")


def _synthetic() -> tuple[dict, list[results.Result]]:
    meta = {"gpu": "NVIDIA H100 80GB HBM3", "torch": "2.11.0+cu130", "cuda": "13.0", "python": "3.12.3"}
    checks = [
        results.Result("install", True, {"summary": "rtdebug 0.1.0 from the wheelhouse"}, 12.5),
        results.Result("lazy_dap", False, {"error": "DAPError: timed out waiting for event 'stopped'"}, 61.0),
        results.Result("bench", True, {"summary": "x " * 200, "ratios": {"lazy_vs_plain": 0.998,
                                                                          "stopon_vs_off": 0.97}}, 90.25),
    ]  # fmt: skip
    return meta, checks


def test_results_round_trip_and_the_summary_fits_one_screen(tmp_path):
    meta, checks = _synthetic()
    path = tmp_path / "gpu-check.json"
    results.write(path, meta, checks)
    assert results.load(path) == (meta, checks)
    text = results.summary(meta, checks)
    lines = text.splitlines()
    assert lines[0] == "gpu-check: 1 of 3 checks FAILED"
    assert lines[1] == "gpu NVIDIA H100 80GB HBM3, torch 2.11.0+cu130, cuda 13.0, python 3.12.3"
    assert lines[3] == "ok   install                12.5 s  rtdebug 0.1.0 from the wheelhouse"
    assert lines[4] == "FAIL lazy_dap               61.0 s  DAPError: timed out waiting for event 'stopped'"
    assert "steps/s ratios (same run): lazy_vs_plain 0.998, stopon_vs_off 0.970, collrec_on_vs_off n/a" in lines
    assert lines[-1] == "failed: lazy_dap (details in gpu-check.json, logs in logs/)"
    assert len(lines) <= 24 and max(map(len, lines)) <= results.WIDTH
    assert sum(1 for ln in lines if ln.startswith(" " * 36 + "x")) == 1  # a long gist: 2 lines at most, then cut
    r = subprocess.run([PY, str(ROOT / "scripts/gpu_check/results.py"), str(path)], capture_output=True, text=True)
    assert (r.returncode, r.stdout) == (1, text)  # a failed check: exit 1, the same summary


def test_all_ok_says_so_and_a_dry_run_says_it_proves_nothing():
    ok = [results.Result("install", True, {}, 1.0)]
    assert results.summary({}, ok).splitlines()[0] == "gpu-check: all 1 ok"
    assert results.summary({"dry": True}, ok).splitlines()[0] == (
        "gpu-check: all 1 ok (dry run on CPU: proves nothing about a GPU)"
    )


@pytest.mark.parametrize(
    "text, why",
    [
        ("{", "not JSON"),
        ("[]", 'not a GPU check result (no "checks" list)'),
        ('{"checks": [1]}', "check 0: not an object"),
        ('{"checks": [{"name": "a", "ok": 1, "details": {}, "seconds": 1}]}', "check a: ok is not true or false"),
        ('{"checks": [{"name": "a", "ok": true, "details": [], "seconds": 1}]}', "check a: details is not an object"),
        ('{"checks": [{"name": "a", "ok": true, "details": {}, "seconds": -1}]}', "check a: seconds is not a number"),
        ('{"checks": [{"name": "", "ok": true, "details": {}, "seconds": 1}]}', "check 0: no name"),
        ('{"meta": 3, "checks": []}', "meta is not an object"),
        ('{"checks": [{"name": "a", "ok": true, "details": {}, "seconds": 1},'
         ' {"name": "a", "ok": true, "details": {}, "seconds": 2}]}', "a check is named twice"),
    ],
)  # fmt: skip
def test_a_malformed_results_file_is_refused_in_one_line(text, why, tmp_path):
    with pytest.raises(results.ResultsError, match="^" + re.escape(why)):
        results.parse(text)
    bad = tmp_path / "bad.json"
    bad.write_text(text)
    r = subprocess.run([PY, str(ROOT / "scripts/gpu_check/results.py"), str(bad)], capture_output=True, text=True)
    assert r.returncode == 1 and r.stdout == "" and r.stderr.startswith(f"gpu-check: error: {bad}: {why}"), r
    assert r.stderr.count("\n") == 1


def _wheelhouse(tmp_path: Path, version: str) -> Path:
    wh = tmp_path / f"wh-{version}"
    env = dict(os.environ, GPU_WHEELHOUSE=str(wh), GPU_PYTHON_VERSION=version, PYTHON=PY)
    r = subprocess.run(["bash", str(BUNDLE_SH)], env=env, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stdout + r.stderr
    assert r.stdout.startswith(f"gpu-bundle: {wh} (") and f"for CPython {version} x86_64:" in r.stdout
    return wh


@pytest.mark.e2e  # needs PyPI (the cp312 debugpy wheel)
def test_the_bundle_holds_rtdebug_and_its_dependencies_for_cpython_312_offline(tmp_path):
    wh = _wheelhouse(tmp_path, "3.12")
    names = sorted(p.name for p in wh.iterdir())
    assert [n.split("-")[0] for n in names] == ["debugpy", "psutil", "rtdebug"], names
    assert "-cp312-cp312-manylinux" in names[0] and names[0].endswith("_x86_64.whl"), names
    assert "-abi3-" in names[1] and names[2] == "rtdebug-0.1.0-py3-none-any.whl", names
    assert sum(p.stat().st_size for p in wh.iterdir()) < 8 << 20  # a few MiB
    with zipfile.ZipFile(wh / names[2]) as z:  # the wheel holds the package, the schema and every subpackage
        files = z.namelist()
    assert "rtdebug/registry/registry.schema.json" in files and "rtdebug/rank/bootstrap.py" in files
    # pip resolves rtdebug and its dependencies for CPython 3.12 from the wheelhouse alone
    pip = [PY, "-m", "pip", "install", "--dry-run", "--ignore-installed", "--no-index", "--find-links", str(wh)]
    pip += ["--only-binary=:all:", "--python-version", "3.12"]
    pip += [a for n in (34, 28, 17, 12) for a in ("--platform", f"manylinux_2_{n}_x86_64")]  # pip matches each exactly
    pip += ["--target", str(tmp_path / "t"), "rtdebug"]
    env = dict(os.environ, PIP_CONFIG_FILE=os.devnull)
    r = subprocess.run(pip, env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    assert "Would install debugpy-1.8" in r.stdout and "psutil-" in r.stdout and "rtdebug-0.1.0" in r.stdout


@pytest.mark.e2e
def test_bundle_takes_no_arguments():
    r = subprocess.run(["bash", str(BUNDLE_SH), "--bogus"], capture_output=True, text=True)
    assert (r.returncode, r.stderr) == (2, "gpu-bundle: error: takes no arguments (see --help)\n")
    assert subprocess.run(["bash", str(BUNDLE_SH), "--help"], capture_output=True, text=True).returncode == 0


def _ours(tmp_path: Path) -> list[str]:
    """Processes whose command line names this test's folder (the check's jobs run in a temp dir under it)."""
    found = []
    for p in psutil.process_iter(["cmdline"]):
        if any(str(tmp_path) in a for a in p.info["cmdline"] or []):
            found.append(" ".join(p.info["cmdline"]))
    return found


@pytest.mark.e2e
def test_every_check_runs_dry_on_cpu_with_gloo_and_leaves_nothing_running(tmp_path):
    """The same checks and rank scripts as on a GPU, on CPU (GPU_CHECK_DEVICE=cpu): nothing of the GPU is
    proven here, but every check's steps (jobs, DAP stops, stacks, stop-on, post-mortem, adopt, bench) run."""
    out = tmp_path / "out"
    args = ["--dry", "--python", PY, "--out", str(out), "--hold", "1", "--bench-seconds", "0.2", "--bench-rounds", "1"]
    args += ["--budget", "1200"]  # ~90 s on 2 idle cores; a loaded machine must not turn into a false failure
    r = gpu_check(*args, env={"TMPDIR": str(tmp_path), "GPU_CHECK_TIMEOUT": "1260"}, timeout=1300)
    meta, got = results.load(out / "gpu-check.json")
    failed = {c.name: c.details for c in got if not c.ok}
    assert r.returncode == 0 and not failed, (r.stdout, r.stderr, failed)
    assert [c.name for c in got] == NAMES and meta["dry"] is True
    assert (out / "summary.txt").read_text() == r.stdout and r.stdout.startswith("gpu-check: all 10 ok (dry run")
    by = {c.name: c.details for c in got}
    assert by["lazy_dap"]["evaluated"] == {"device": "'cpu'", "sum": "18.0", "backend": "'gloo'"}
    assert by["stop_on_nonfinite"]["stop"]["reason"].endswith("at step 3 (origin)")
    assert by["pg_timeout"]["rank_saw"]["group_timeout_s"] == 7200.0
    assert "ALLREDUCE [[8]] Float" in by["stacks_flight"]["history_cells"]
    assert by["stacks_gloo_cuda"]["verdict"].startswith("ranks are blocked in different collectives: rank 0 in ALLR")
    assert set(by["bench"]["ratios"]) == set(results.RATIOS)
    assert {p.name for p in (out / "logs").iterdir()} >= {"lazy_dap.log", "adopt_job.log", "commands.log"}
    assert _ours(tmp_path) == []
    assert [p for p in tmp_path.iterdir() if p.name.startswith("gpu-check-")] == []  # its work folder is gone


@pytest.mark.e2e
def test_only_runs_the_named_checks_after_the_install(tmp_path):
    out = tmp_path / "out"
    r = gpu_check("--dry", "--python", PY, "--out", str(out), "--only", "lazy_dap", env={"TMPDIR": str(tmp_path)})
    assert r.returncode == 0, r.stdout + r.stderr
    assert [c.name for c in results.load(out / "gpu-check.json")[1]] == ["install", "lazy_dap"]


def test_markdown_for_bench_results_names_the_run_and_each_check(tmp_path):
    meta, checks = _synthetic()
    path = tmp_path / "gpu-check.json"
    results.write(path, dict(meta, started="2026-12-07 10:00:00 UTC"), checks)
    r = subprocess.run([PY, str(ROOT / "scripts/gpu_check/results.py"), "--markdown", str(path)], capture_output=True,
                       text=True)  # fmt: skip
    lines = r.stdout.splitlines()
    assert r.returncode == 1 and lines[0] == "# GPU check: the last run" and "2026-12-07 10:00:00 UTC" in lines[2]
    assert "**1 of 3 checks failed: lazy_dap.**" in lines
    assert "| lazy_dap | FAIL | 61.0 | DAPError: timed out waiting for event 'stopped' |" in lines
    assert lines[-1].startswith("steps/s ratios, measured in the same run: lazy_vs_plain 0.998")
    bad = subprocess.run([PY, str(ROOT / "scripts/gpu_check/results.py")], capture_output=True, text=True)
    assert bad.returncode == 2 and bad.stderr.startswith("gpu-check: error: usage: results.py") and bad.stdout == ""


@pytest.mark.e2e
def test_a_check_past_its_limit_is_recorded_its_jobs_ended_and_the_next_one_runs(tmp_path):
    out = tmp_path / "out"
    args = ["--dry", "--python", PY, "--out", str(out), "--only", "stop_on_nonfinite,stacks_flight"]
    r = gpu_check(*args, "--limit", "stop_on_nonfinite=1", env={"TMPDIR": str(tmp_path)}, timeout=300)
    got = {c.name: c for c in results.load(out / "gpu-check.json")[1]}
    assert r.returncode == 1 and list(got) == ["install", "stop_on_nonfinite", "stacks_flight"], r.stdout
    assert not got["stop_on_nonfinite"].ok and got["stop_on_nonfinite"].details["error"] == "timed out after 1 s"
    assert got["stacks_flight"].ok, got["stacks_flight"].details
    assert "FAIL stop_on_nonfinite" in r.stdout and r.stdout.splitlines()[-1].startswith("failed: stop_on_nonfinite")
    assert _ours(tmp_path) == []
