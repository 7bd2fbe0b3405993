"""The pg-timeout proof on gloo: a short default fails a paused run, a long one lets it pass."""

from __future__ import annotations

import json

import pytest

from support.jobs import rtdebug
from support.paths import SCRIPTS

pytestmark = pytest.mark.e2e


@pytest.mark.parametrize("timeout_s, expect_ok", [(5, False), (120, True)])
def test_paused_rank0_vs_pg_timeout(timeout_s, expect_ok, job, port_base):
    j = job(
        "torchrun",
        "--debug-port-base",
        str(port_base),
        "--pg-timeout",
        str(timeout_s),
        "--nproc-per-node",
        "2",
        str(SCRIPTS / "pause_rank0.py"),
        "10",
    )
    if expect_ok:  # ps shows the configured timeout while the job runs (a paused rank must stay under it)
        sid = j.session_id()
        ps = json.loads(rtdebug("ps", "--json").stdout)["sessions"]
        session = next(s for s in ps if s["session_id"] == sid)
        assert (session["pg_timeout_s"], session["pg_timeout_source"]) == (timeout_s, "--pg-timeout"), session
    code = j.wait(240)
    out = j.output()
    if expect_ok:
        assert code == 0, out[-3000:]
        assert "rank 1 all_reduce ok: 2.0" in out and "rank 0 all_reduce ok: 2.0" in out
    else:
        assert code != 0, out[-3000:]
        assert "rank 1 all_reduce ok" not in out
        assert "Timed out" in out or "timed out" in out.lower(), out[-3000:]
