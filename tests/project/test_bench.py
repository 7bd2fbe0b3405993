"""bench/ stays runnable: the suite behind docs/performance.md runs ``--dry`` (its options, every section's code
imported, the report and table of a run that measured nothing), and every probe in bench/probes/ has ``--help``
and a docstring naming the dated result it produced. What a run measures is never asserted here."""

from __future__ import annotations

import ast
import os
import re
import subprocess
from pathlib import Path

import pytest

from support.paths import ROOT

BENCH_SH = ROOT / "scripts" / "bench.sh"
PROBES = sorted(p for p in (ROOT / "bench" / "probes").glob("*.py") if p.name != "__init__.py")


def bench(*args: str, timeout: float = 60) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    return subprocess.run(["bash", str(BENCH_SH), *args], env=env, capture_output=True, text=True, timeout=timeout)


def test_the_suite_runs_dry(tmp_path: Path) -> None:
    out = tmp_path / "dry.md"
    r = bench("--dry", "--quick", "--only", "1,3", "--out", str(out))
    assert r.returncode == 0, r.stderr
    assert f"wrote {out} (--dry: no job started)" in r.stdout
    text = out.read_text()
    assert text.startswith("# rtdebug benchmark results") and "## Summary" in text and "## Reproduce" in text


def test_a_probe_that_is_not_there_is_one_line(tmp_path: Path) -> None:
    r = bench("probes/no_such_probe")
    assert (r.returncode, r.stdout) == (2, "")
    assert r.stderr == "bench: error: no probe bench/probes/no_such_probe.py (ls bench/probes)\n"


@pytest.mark.parametrize("probe", PROBES, ids=lambda p: p.stem)
def test_every_probe_has_help_and_names_its_result(probe: Path) -> None:
    source = probe.read_text()
    doc = ast.get_docstring(ast.parse(source)) or ""
    assert "ArgumentParser(" in source or '"--help"' in source, f"{probe.name}: no --help"
    if probe.stem.endswith("_job"):  # the program a probe runs: its docstring names that probe
        assert re.search(r"bench/probes/\w+\.py", doc), f"{probe.name}: name the probe that runs it"
        return
    result = re.search(r"^Result: (.+)", doc, re.M)
    assert result, f"{probe.name}: its docstring must end with 'Result: bench/results/DATE-....md'"
    named = re.findall(r"bench/results/[\w.-]+\.md", result.group(1))
    assert named or "none kept" in result.group(1), result.group(1)
    assert all((ROOT / n).exists() for n in named), named
