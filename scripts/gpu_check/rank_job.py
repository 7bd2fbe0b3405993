"""The rank side of the GPU check (scripts/gpu_check/check.py starts it under ``rtdebug torchrun`` or plain torchrun).

    rank_job.py MODE INFO [CONTROL] [options]

Each mode writes what the rank saw as JSON to ``INFO`` (``INFO.N`` for its N-th note) and, where it waits,
waits for the file ``CONTROL``. The device is CUDA with NCCL; ``GPU_CHECK_DEVICE=cpu`` makes it CPU with gloo,
so the same script runs in the CPU-side test (tests/project/test_gpu_check.py) and cannot rot.

    dap          a CUDA tensor ``x``, one all_reduce, then a loop until CONTROL (the breakpoint's line)
    hold         the process-group timeout and the NCCL heartbeat as this rank sees them, then (after CONTROL) a
                 line the client holds the rank at, and a collective after the hold
    hang         two gloo ranks on the one GPU with CUDA tensors: rank 1 skips an all_reduce (a hang to explain)
    collectives  a few collectives, then one issued behind a busy CUDA stream (still in flight while asked for
                 stacks), then waits for CONTROL
    stopon       a DDP training loop with a NaN in the batch at --nan-step (for --stop-on nonfinite)
    raise        a CUDA error raised in the rank (--kind oom: out of memory; --kind assert: a device-side assert)
    bench        a small transformer's DDP training step, timed in blocks; INFO gets the median steps/s
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from pathlib import Path

import torch
import torch.distributed as dist
from torch import nn

DEVICE = os.environ.get("GPU_CHECK_DEVICE", "cuda")
BACKEND = os.environ.get("GPU_CHECK_BACKEND") or ("nccl" if DEVICE == "cuda" else "gloo")  # gloo: CUDA tensors too
NOTES = [0]


def note(info: str, **values: object) -> None:
    """One JSON note, written whole (temp file and rename) so the driver never reads half of one."""
    NOTES[0] += 1
    path = Path(f"{info}.{NOTES[0]}")
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(values))
    tmp.rename(path)


def wait_for(control: str) -> None:
    while not os.path.exists(control):
        time.sleep(0.02)


def setup() -> torch.device:
    local = int(os.environ.get("LOCAL_RANK", "0"))
    if DEVICE == "cuda":  # two gloo ranks share the one GPU
        local %= torch.cuda.device_count()
        torch.cuda.set_device(local)
    dist.init_process_group(BACKEND)  # no timeout=: the default, as rtdebug raised it (or torch's own)
    return torch.device(DEVICE, local) if DEVICE == "cuda" else torch.device("cpu")


def sync() -> None:
    if DEVICE == "cuda":
        torch.cuda.synchronize()


def mode_dap(a: argparse.Namespace, dev: torch.device) -> None:
    x = torch.arange(4, dtype=torch.float32, device=dev) * 3
    dist.all_reduce(x)
    note(a.info, backend=dist.get_backend(), device=str(x.device), pid=os.getpid(), sum=float(x.sum()))
    n = 0
    while not os.path.exists(a.control):
        n += 1  # BREAKPOINT: dap loop
        time.sleep(0.01)
    dist.barrier()
    note(a.info, done=True, loops=n)


def seen_timeouts(dev: torch.device) -> dict[str, object]:
    from torch.distributed import distributed_c10d as c10d

    out: dict[str, object] = {"backend": dist.get_backend(), "device": str(dev)}
    default = getattr(c10d, "default_pg_nccl_timeout" if BACKEND == "nccl" else "default_pg_timeout", None)
    out["default_timeout_s"] = default.total_seconds() if default is not None else None
    try:
        out["group_timeout_s"] = dist.group.WORLD._get_backend(dev).options._timeout.total_seconds()
    except Exception as exc:  # an older torch: say what is missing
        out["group_timeout_s"] = None
        out["group_timeout_error"] = f"{type(exc).__name__}: {exc}"[:200]
    out["heartbeat_env"] = os.environ.get("TORCH_NCCL_HEARTBEAT_TIMEOUT_SEC")
    out["torch"] = torch.__version__
    out["nccl"] = ".".join(map(str, torch.cuda.nccl.version())) if DEVICE == "cuda" else None
    return out


def mode_hold(a: argparse.Namespace, dev: torch.device) -> None:
    before = torch.ones(2, device=dev)
    dist.all_reduce(before)
    note(a.info, **seen_timeouts(dev))
    wait_for(a.control)
    t0 = time.monotonic()
    held = 0.0  # BREAKPOINT: hold
    held = time.monotonic() - t0
    after = torch.ones(2, device=dev) * 2
    dist.all_reduce(after)
    sync()
    note(a.info, held_s=round(held, 2), after=after.tolist())
    dist.destroy_process_group()


def recorders() -> dict[str, object]:
    """How many entries each of torch's Flight Recorder dumps holds now: the generic one (gloo, CPU) and NCCL's
    own, where this torch has it (which of the two holds a NCCL job's collectives is what the check looks at)."""
    c10d = torch._C._distributed_c10d
    out: dict[str, object] = {}
    for name in ("_dump_fr_trace_json", "_dump_nccl_trace_json"):
        dump = getattr(c10d, name, None)
        if dump is None:
            out[name] = "absent"
            continue
        try:
            out[name] = len(json.loads(dump(True, False)).get("entries") or [])
        except Exception as exc:
            out[name] = f"{type(exc).__name__}: {exc}"[:200]
    return out


def mode_collectives(a: argparse.Namespace, dev: torch.device) -> None:
    t = torch.ones(256, device=dev)
    for _ in range(a.steps):
        dist.all_reduce(t)
    dist.broadcast(t, 0)
    busy = getattr(torch.cuda, "_sleep", None) if DEVICE == "cuda" and a.busy_cycles > 0 else None
    if busy is not None:
        busy(a.busy_cycles)  # the compute stream is busy: the next collective waits behind it
    work = dist.all_reduce(torch.ones(8, device=dev), async_op=True)
    note(a.info, inflight=True, backend=dist.get_backend(), t=time.time())
    work.wait()
    sync()  # the main thread blocks here, in C++, while the stacks are taken
    note(a.info, synced=True, recorders=recorders())
    wait_for(a.control)
    dist.destroy_process_group()


def mode_hang(a: argparse.Namespace, dev: torch.device) -> None:
    """Two gloo ranks, CUDA tensors: rank 1 skips the all_reduce rank 0 is in and waits in a barrier (a hang)."""
    rank = dist.get_rank()
    t = torch.ones(4, device=dev)
    for _ in range(a.steps):
        dist.all_reduce(t)
    a.info = f"{a.info}.r{rank}"
    note(a.info, rank=rank, device=str(t.device), backend=dist.get_backend())
    if rank == 1:
        dist.barrier()  # HANG: rank 1 skipped one all_reduce
    else:
        dist.all_reduce(t)  # HANG: rank 0 waits here for rank 1


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc1 = nn.Linear(8, 16)
        self.fc2 = nn.Linear(16, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(torch.relu(self.fc1(x)))


def mode_stopon(a: argparse.Namespace, dev: torch.device) -> None:
    torch.manual_seed(0)
    net = Net().to(dev)
    model = nn.parallel.DistributedDataParallel(net, device_ids=[dev.index] if DEVICE == "cuda" else None)
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    steps_done = 0
    for step in range(a.steps):
        x = torch.randn(4, 8, device=dev)
        if step == a.nan_step:
            x[0, 0] = float("nan")
        loss = model(x).pow(2).mean()
        loss.backward()  # STOP BACKWARD
        opt.step()  # STOP STEP
        opt.zero_grad()
        steps_done += 1
    finite = all(bool(torch.isfinite(p).all()) for p in net.parameters())
    note(a.info, steps_done=steps_done, finite=finite)
    dist.destroy_process_group()


def mode_raise(a: argparse.Namespace, dev: torch.device) -> None:
    t = torch.ones(4, device=dev)
    note(a.info, ready=True, kind=a.kind)
    wait_for(a.control)
    kind = a.kind
    if kind == "oom":
        big = torch.empty(1 << 50, device=dev)  # RAISE SITE: oom
        print(big.shape)
    else:  # an index past the end: a device-side assert on CUDA (raised at the sync .item() makes), IndexError on CPU
        print(float(t[torch.tensor([10], device=dev)].sum().item()))  # RAISE SITE: assert


def transformer(dim: int) -> nn.Module:
    torch.manual_seed(0)
    layer = nn.TransformerEncoderLayer(dim, 4, 4 * dim, dropout=0.0, batch_first=True)
    return nn.Sequential(nn.TransformerEncoder(layer, 2, enable_nested_tensor=False), nn.Linear(dim, 1))


def mode_bench(a: argparse.Namespace, dev: torch.device) -> None:
    model = nn.parallel.DistributedDataParallel(
        transformer(a.dim).to(dev), device_ids=[dev.index] if DEVICE == "cuda" else None
    )
    opt = torch.optim.SGD(model.parameters(), lr=1e-4)
    x = torch.randn(a.batch, 64, a.dim, device=dev)

    def step() -> None:
        loss = model(x).pow(2).mean()
        loss.backward()
        opt.step()
        opt.zero_grad()
        logged = loss.detach().clone()
        dist.all_reduce(logged)  # the loss for logging, as jobs do: a Python-level collective (the record sees it)

    for _ in range(a.warmup):
        step()
    sync()
    rates: list[float] = []
    end = time.monotonic() + a.seconds
    while time.monotonic() < end or len(rates) < 3:
        t0 = time.perf_counter()
        for _ in range(a.block):
            step()
        sync()
        rates.append(a.block / (time.perf_counter() - t0))
    note(a.info, steps_per_s=statistics.median(rates), blocks=len(rates), block=a.block, batch=a.batch, dim=a.dim)
    dist.destroy_process_group()


MODES = {
    "dap": mode_dap,
    "hold": mode_hold,
    "collectives": mode_collectives,
    "hang": mode_hang,
    "stopon": mode_stopon,
    "raise": mode_raise,
    "bench": mode_bench,
}


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("mode", choices=sorted(MODES))
    p.add_argument("info")
    p.add_argument("control", nargs="?", default="")
    p.add_argument("--steps", type=int, default=6)
    p.add_argument("--nan-step", type=int, default=-1)
    p.add_argument("--kind", choices=("oom", "assert"), default="oom")
    p.add_argument("--busy-cycles", type=int, default=0)
    p.add_argument("--seconds", type=float, default=5.0)
    p.add_argument("--block", type=int, default=10)
    p.add_argument("--warmup", type=int, default=10)
    p.add_argument("--batch", type=int, default=16)
    p.add_argument("--dim", type=int, default=256)
    a = p.parse_args()
    dev = setup()
    MODES[a.mode](a, dev)


main()
