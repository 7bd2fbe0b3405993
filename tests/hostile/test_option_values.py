"""Option values that parse as numbers but mean none: one line, exit 2, before any session is looked for."""

from __future__ import annotations

import pytest

from support.jobs import rtdebug


@pytest.mark.parametrize("value", ["nan", "inf", "-inf", "0", "-1"])
def test_stacks_timeout_must_be_a_finite_positive_number(value, tmp_path):
    r = rtdebug("stacks", f"--timeout={value}", env={"RTDEBUG_REGISTRY_DIR": str(tmp_path / "registry")}, timeout=60)
    assert (r.returncode, r.stdout) == (2, ""), (r.returncode, r.stdout, r.stderr)
    assert r.stderr == f"rtdebug: error: --timeout must be > 0 seconds, got {float(value):g}\n", r.stderr
