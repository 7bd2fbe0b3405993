"""``--stop-on``'s parts that decide without a job: the NaN/Inf test (``finite``), the stop reasons
(``agree.describe``), adopt's one-line summary, and the meeting of ranks that set it on a running job
(``together``: three real processes on a real TCPStore; only the process group's step clock is given)."""

from __future__ import annotations

import gc
import subprocess
import weakref

import pytest

torch = pytest.importorskip("torch")

from rtdebug.commands.adoptstopon import summary  # noqa: E402
from rtdebug.rank.stopon import agree, ddp, finite, together  # noqa: E402
from rtdebug.rank.stopon.stepstate import STATE, WeakIdMap  # noqa: E402

from support.paths import PY, SCRIPTS  # noqa: E402


@pytest.mark.parametrize(
    "values,dtype,want",
    [
        ([1.0, 2.0], torch.float32, False),
        ([1.0, float("nan")], torch.float32, True),
        ([float("inf"), 1.0], torch.float32, True),
        ([float("-inf"), float("inf")], torch.float32, True),
        ([3e38, 3e38], torch.float32, False),  # the sum overflows, the values do not: confirmed exactly
        ([60000.0, 60000.0], torch.float16, False),
        ([1.0, float("nan")], torch.bfloat16, True),
        ([1, 2], torch.int64, False),
    ],
)  # fmt: skip
def test_flag_is_exact(values, dtype, want):
    assert finite.flag(torch.tensor(values, dtype=dtype)) is want


def test_flag_of_complex_and_of_a_tensor_that_requires_grad():
    assert finite.flag(torch.tensor([1 + 1j, complex(float("nan"), 0)])) is True
    assert finite.flag(torch.ones(3, requires_grad=True)) is False


def test_any_true_reads_device_flags_in_one_go():
    assert finite.any_true([False, torch.tensor(False), torch.tensor(True)]) is True
    assert finite.any_true([False, torch.tensor(False)]) is False
    assert finite.any_true([]) is False and finite.truthy(torch.tensor(True)) is True


def _event(via, origins, kinds, why="", **mine):
    local = {"loss": False, "origin": None, "post": False, "deep": None, "pending": None, **mine}
    return {"local": local, "origins": origins, "kinds": kinds, "via": via, "why": why}


@pytest.mark.parametrize(
    "event,want",
    [
        (_event("all-reduce", [1], {1: 1}, post=True),
         ("non-finite grad at step 5: received in the all-reduce (origin: rank 1)", False)),
        (_event("all-reduce", [2], {2: 2}), ("non-finite loss on rank 2 at step 5", False)),
        (_event("all-reduce", [0, 2], {0: 1, 2: 2}), ("non-finite loss or grad on rank 0, 2 at step 5", False)),
        (_event("all-reduce", [], {}, post=True),
         ("non-finite grad after the all-reduce at step 5: no rank had one before it (an overflow)", False)),
        (_event("reduce-scatter", [1], {1: 1}), ("non-finite grad on rank 1 at step 5", False)),
        (_event("all-reduce", [1], {1: 2}, loss=True), ("non-finite loss at step 5 (origin)", True)),
        (_event("alone", [0], {}, why="; this rank alone: the others did not receive it", origin="fc.weight"),
         ("non-finite grad of fc.weight at step 5 (origin); this rank alone: the others did not receive it", True)),
        (_event("all-reduce", [1], {1: 2}, loss=True, pending=("non-finite loss", "micro-batch 0 under no_sync")),
         ("non-finite loss at step 5 (micro-batch 0 under no_sync) (origin)", True)),
        (_event("local", [0], {}, origin="FSDP's reduce-scatter input", deep="layers.1"),
         ("non-finite grad in FSDP's reduce-scatter input at step 5 (origin); first non-finite output: layers.1",
          True)),
    ],
)  # fmt: skip
def test_describe(event, want):
    assert agree.describe(event, 5) == want


def test_deep_names_the_first_non_finite_output_of_a_training_forward_only():
    """``nonfinite:deep``'s forward hook: an evaluation (no_grad) forward with a NaN output is not looked at
    (it would name a module in the next training step's event); the first training output that is, is."""
    fc1, fc2 = torch.nn.Linear(2, 2), torch.nn.Linear(2, 2)
    STATE.modules[fc1], STATE.modules[fc2] = "fc1", "fc2"
    nan = torch.tensor([float("nan")])
    try:
        with torch.no_grad():
            ddp._forward(fc1, (), nan)
        assert STATE.step.deep is None
        ddp._forward(fc1, (), torch.ones(1))
        ddp._forward(fc2, (), (nan, torch.ones(1)))  # a tuple output: its first tensor
        ddp._forward(fc1, (), nan)  # not the first: fc2 stays
        assert STATE.step.deep == "fc2"
    finally:
        STATE.step.deep = None
        for m in (fc1, fc2):
            STATE.modules.pop(m)


def test_a_later_model_is_never_given_a_dead_models_parameter_names():
    """stop-on knows parameters by identity and weakly: once a model is gone, a parameter of a later model
    made at the very same address (the same ``id()``) has no name of the dead one's -- it would name the
    wrong parameter as a NaN's origin. The test makes later models until one does reuse an address."""
    dead = torch.nn.Sequential(torch.nn.Linear(2, 2))
    ddp.watch(dead, hooks=False)
    assert ddp.name_of(dead[0].weight) == "0.weight" and ddp.order_of(dead[0].bias) == 1
    addresses = {id(p) for p in dead.parameters()}
    known = len(STATE.names)
    del dead
    gc.collect()
    assert len(STATE.names) == known - 2  # its entries went with it
    later, reused = [], None
    for _ in range(10000):  # each kept alive, so that each takes fresh memory until a freed address comes
        model = torch.nn.Linear(2, 2)
        later.append(model)
        reused = next((p for p in model.parameters() if id(p) in addresses), None)
        if reused is not None:
            break
    assert reused is not None, "no later parameter was made at a dead one's address: the test proves nothing"
    assert ddp.name_of(reused) is None and ddp.order_of(reused) == 1 << 30


def test_weak_id_map_holds_nothing_alive_and_matches_identity_only():
    m = WeakIdMap()
    a, b = torch.zeros(3), torch.zeros(3)  # equal tensors: told apart by identity, never compared
    m[a] = "a"
    assert a in m and b not in m and m.get(b) is None and m.get(a) == "a" and list(m.keys()) == [a]
    ref = weakref.ref(a)
    del a
    assert ref() is None and len(m) == 0 and list(m.keys()) == []


def test_adopt_summary():
    ok = [f"rtdebug: rank {r} stops on nonfinite" for r in range(3)]
    assert summary(ok) == ("rtdebug: 3 ranks stop on nonfinite from the next optimizer step they reach together "
                           "(steps counted from there)")  # fmt: skip
    bad = [*ok[:2], "rtdebug: rank 2: --stop-on not set: RuntimeError: no store"]
    assert summary(bad) == "rtdebug: rank 2: --stop-on not set: RuntimeError: no store"
    off = summary([f"rtdebug: rank {r}: --stop-on is off" for r in range(2)])
    assert off.startswith("rtdebug: 2 ranks: --stop-on is off")


def _run(delays: dict[int, list[float]], server=None) -> dict[int, int]:
    """Each rank a process (tests/scripts/together_rank.py) on one real TCPStore; the step each armed at."""
    world = len(delays)
    server = server or torch.distributed.TCPStore("127.0.0.1", 0, None, True, wait_for_workers=False)
    procs = {
        r: subprocess.Popen(
            [PY, str(SCRIPTS / "together_rank.py"), str(server.port), str(r), str(world), ",".join(map(str, d))],
            stdout=subprocess.PIPE,
            text=True,
        )  # fmt: skip
        for r, d in delays.items()
    }
    return {r: int(p.communicate(timeout=60)[0].split()[-1]) for r, p in procs.items()}


def test_ranks_that_come_together_arm_at_the_same_step():
    assert _run({r: [0.0, 0.0, 0.0] for r in range(3)}) == {0: 10, 1: 10, 2: 10}


def test_a_rank_late_past_the_wait_makes_every_rank_try_again_and_all_arm_at_one_later_step():
    late = together.WAIT_S + 0.4  # rank 2 comes to step 10 after the others gave up on it
    got = _run({0: [0.0] * 4, 1: [0.0] * 4, 2: [late, 0.0, 0.0, 0.0]})
    assert len(set(got.values())) == 1 and got[0] > 10, got


def test_a_forged_outcome_is_no_exception_and_arms_no_rank_there():
    server = torch.distributed.TCPStore("127.0.0.1", 0, None, True, wait_for_workers=False)
    server.set("rtdebug/stopon/g1/at/10/state", "\x00garbage")  # whoever can write the job's store
    assert _run({0: [0.0, 0.0], 1: [0.0, 0.0]}, server) == {0: 11, 1: 11}
