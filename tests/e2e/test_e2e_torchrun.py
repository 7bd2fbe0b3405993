"""End to end: real torchrun, real Ray local mode, real debugpy, a real DAP client per rank."""

from __future__ import annotations

import pytest

from support.dap import DAPClient, stop_in_each_rank
from support.jobs import wait_ranks
from support.paths import EXAMPLES, marker_line
from support.ports import port_free
from support.procs import alive

pytestmark = pytest.mark.e2e

CASES = {  # the last field: rtdebug's options before torchrun's, or after them (any order works)
    "ddp_fashion": ("ddp step", "ray.train.get_context().get_world_rank()", ["--epochs", "1", "--samples", "128"], 0),
    "plain_ddp": ("plain step", "dist.get_rank()", ["--epochs", "1", "--samples", "64"], 1),
}


@pytest.mark.parametrize("example", sorted(CASES))
def test_breakpoint_stops_in_each_rank(example, job, registry_dir, port_base):
    marker, expr, extra, ours_last = CASES[example]
    script = EXAMPLES / f"{example}.py"
    line = marker_line(script, marker)
    ours, torchruns = ["--debug-port-base", str(port_base), "--wait", "all"], ["--nproc-per-node", "2"]
    j = job("torchrun", *(torchruns + ours if ours_last else ours + torchruns), str(script), *extra)
    sid = j.session_id()
    ranks = wait_ranks(registry_dir, sid, 2)
    j.wait_output("rtdebug: all 2 local ranks ready")
    assert {r["port"] for r in ranks.values()} == {port_base, port_base + 1}
    pids = [r["pid"] for r in ranks.values()] + [p.pid for p in j.descendants()]

    clients = {}
    for rank in (0, 1):
        c = DAPClient("127.0.0.1", port_base + rank)
        verified = c.attach({str(script): [line]})
        assert verified[str(script)]["breakpoints"][0]["verified"] is True
        clients[rank] = c
    stop_in_each_rank(clients, str(script), line, expr)
    for c in clients.values():
        c.disconnect()

    assert j.wait(180) == 0, j.output()[-3000:]
    assert f"rtdebug: session {sid} exited (exit code 0)" in j.output()
    assert alive(pids) == []
    assert port_free(port_base) and port_free(port_base + 1)


def test_lazy_rank_attaches_mid_run(job, registry_dir, port_base):
    """No --wait: both ranks run at once; attaching later still stops at the breakpoint."""
    script = EXAMPLES / "plain_ddp.py"
    line = marker_line(script, "plain step")
    j = job(
        "torchrun",
        "--debug-port-base",
        str(port_base),
        "--nproc-per-node",
        "2",
        str(script),
        "--epochs",
        "100000",  # runs until the fixture ends it: 400 epochs once finished before a loaded CI attached
        "--samples",
        "64",
    )
    sid = j.session_id()
    ranks = wait_ranks(registry_dir, sid, 2)
    assert all(r["lazy"] for r in ranks.values())
    j.wait_output("rank 1 epoch 0")  # user code runs before anyone attached
    c = DAPClient("127.0.0.1", port_base + 1)
    c.attach({str(script): [line]})
    stopped = c.wait_stopped(60)
    frame = c.top_frame(stopped["threadId"])
    assert c.evaluate("dist.get_rank()", frame["id"]) == "1"
    state = wait_ranks(registry_dir, sid, 1, states=("attached",))[1]
    assert state["lazy"] is False and state["attach_count"] == 1
    c.request("setBreakpoints", source={"path": str(script)}, breakpoints=[])
    c.continue_(stopped["threadId"])
    c.disconnect()


def test_two_nodes_static_rendezvous_ports_follow_global_rank(job, registry_dir, port_base):
    """Two 'nodes' on one machine (--node-rank 0/1): each reserves only its own ranks' ports."""
    import random

    script = EXAMPLES / "plain_ddp.py"
    line = marker_line(script, "plain step")
    master = str(random.randrange(41000, 49000))
    common = [
        "--debug-port-base",
        str(port_base),
        "--wait",
        "all",
        "--nnodes",
        "2",
        "--nproc-per-node",
        "1",
        "--master-addr",
        "127.0.0.1",
        "--master-port",
        master,
    ]
    nodes = [
        job("torchrun", *common, "--node-rank", str(n), str(script), "--epochs", "1", "--samples", "32") for n in (0, 1)
    ]
    sids = [j.session_id() for j in nodes]
    for n, sid in enumerate(sids):
        ranks = wait_ranks(registry_dir, sid, 1)
        assert list(ranks) == [n] and ranks[n]["port"] == port_base + n and ranks[n]["node_rank"] == n
    clients = [DAPClient("127.0.0.1", port_base + n) for n in (0, 1)]
    for c in clients:
        c.attach({str(script): [line]})
    for n, c in enumerate(clients):
        stopped = c.wait_stopped(120)
        frame = c.top_frame(stopped["threadId"])
        assert c.evaluate("dist.get_rank()", frame["id"]) == str(n)
        c.request("setBreakpoints", source={"path": str(script)}, breakpoints=[])
        c.continue_(stopped["threadId"])
    for c in clients:
        c.disconnect()
    assert [j.wait(120) for j in nodes] == [0, 0]


def test_breakpoint_in_preimported_torch_module(job, registry_dir, port_base):
    """--wait ranks import torch before debugpy starts; a justMyCode=false breakpoint in torch still hits."""
    import inspect

    import torch.nn.functional as F

    lines, start = inspect.getsourcelines(F.mse_loss)
    body = start + next(i for i, text in enumerate(lines) if text.strip().startswith("if has_torch_function"))
    torch_file = inspect.getsourcefile(F)
    j = job(
        "torchrun",
        "--debug-port-base",
        str(port_base),
        "--wait",
        "all",
        "--nproc-per-node",
        "2",
        str(EXAMPLES / "plain_ddp.py"),
        "--epochs",
        "1",
        "--samples",
        "32",
    )
    wait_ranks(registry_dir, j.session_id(), 2)
    clients = [DAPClient("127.0.0.1", port_base + r) for r in (0, 1)]
    for c in clients:
        v = c.attach({torch_file: [body]}, just_my_code=False)
        assert v[torch_file]["breakpoints"][0]["verified"] is True
    for c in clients:
        stopped = c.wait_stopped(120)
        frame = c.top_frame(stopped["threadId"])
        assert frame["name"] == "mse_loss" and frame["line"] == body
        c.request("setBreakpoints", source={"path": torch_file}, breakpoints=[])
        c.continue_(stopped["threadId"])
    for c in clients:
        c.disconnect()
    assert j.wait(120) == 0
