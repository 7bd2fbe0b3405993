"""Installing rtdebug must fit the user's environment: ranges, not pins; torch optional.

pyproject.toml states ranges (what the harness needs); constraints/ci.txt pins what this machine tests.
The install checks ask pip itself (a real resolution, ``--dry-run --report``) in the test venv, which
already has torch and Ray, what installing the harness would change.
"""

from __future__ import annotations

import importlib.metadata as md
import json
import os
import subprocess
import sys

import pytest
from packaging.requirements import Requirement

from support.paths import ROOT
from support.venvjobs import require_venv, venv_bin

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10: pip's own copy of the same parser
    from pip._vendor import tomli as tomllib

PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())
TORCH_MISSING = "rtdebug: error: rtdebug torchrun needs PyTorch (pip install torch); `rtdebug run` works without it"


def pip_would_install(tmp_path, *requirements: str) -> dict[str, str]:
    """name -> version of what ``pip install`` would install or replace here (nothing is installed)."""
    report = tmp_path / "report.json"
    r = subprocess.run(
        [sys.executable, "-m", "pip", "install", "--dry-run", "-q", "--report", str(report), *requirements],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert r.returncode == 0, r.stderr[-3000:]
    return {i["metadata"]["name"].lower(): i["metadata"]["version"] for i in json.loads(report.read_text())["install"]}


def all_requirements() -> list[Requirement]:
    project = PYPROJECT["project"]
    extras = project["optional-dependencies"]
    return [Requirement(r) for r in project["dependencies"] + [r for group in extras.values() for r in group]]


def test_requirements_are_ranges_and_torch_is_an_extra():
    reqs = all_requirements()
    pinned = [str(r) for r in reqs if any(s.operator in ("==", "===") for s in r.specifier)]
    assert pinned == []
    core = {Requirement(r).name for r in PYPROJECT["project"]["dependencies"]}
    assert not core & {"torch", "ray"}
    extras = PYPROJECT["project"]["optional-dependencies"]
    assert [Requirement(r).name for r in extras["torch"]] == ["torch"]


def test_this_venv_has_what_the_constraints_pin():
    """CI installs with constraints/ci.txt (scripts/setup.sh), so the suite runs on exactly those versions."""
    pins = {}
    for line in (ROOT / "constraints" / "ci.txt").read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            req = Requirement(line)
            pins[req.name] = next(iter(req.specifier)).version
    assert {"torch", "ray"} <= set(pins)
    for name, version in pins.items():
        assert md.version(name) == version, name
    for req in all_requirements():  # and the pins satisfy the ranges pyproject.toml states
        if req.name in pins:
            assert req.specifier.contains(pins[req.name], prereleases=True), (req, pins[req.name])


@pytest.mark.e2e
def test_install_into_an_env_with_torch_and_ray_leaves_them_alone(tmp_path):
    # control: the same check does see a requirement that would replace an installed package
    installed = md.version("filelock")
    older = "3.12.0" if installed != "3.12.0" else "3.12.2"
    assert pip_would_install(tmp_path, f"filelock=={older}") == {"filelock": older}
    # the harness with every extra that names torch or Ray: only rtdebug itself would be installed
    assert md.version("torch") and md.version("ray")
    assert pip_would_install(tmp_path, ".[torch,ray]") == {"rtdebug": PYPROJECT["project"]["version"]}


@pytest.mark.e2e
@pytest.mark.parametrize("args", [["--nproc-per-node", "2", "train.py"], ["--help"]])
def test_torchrun_without_torch_is_one_line(args, tmp_path, registry_dir):
    """A venv where torch is not importable (the harness installed without it): one line, exit 1."""
    exe = require_venv("3.11")  # scripts/pythons.sh: the harness installed without torch
    no_torch = subprocess.run(
        [str(venv_bin("3.11") / "python"), "-c", "import torch"], cwd=tmp_path, capture_output=True, text=True
    )
    assert no_torch.returncode == 1 and "No module named 'torch'" in no_torch.stderr
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env["RTDEBUG_REGISTRY_DIR"] = str(registry_dir)
    r = subprocess.run(
        [str(exe), "torchrun", *args], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120
    )
    assert (r.returncode, r.stdout, r.stderr) == (1, "", TORCH_MISSING + "\n")
    assert not registry_dir.exists() or not any(registry_dir.iterdir())
