from datetime import timedelta

import pytest

from rtdebug.common import rankenv
from rtdebug.common.errors import HarnessError
from rtdebug.rank.localmode import fixes


def test_ray_env_sets_v2_unless_user_did():
    assert rankenv.ray_env({}) == {"RAY_TRAIN_V2_ENABLED": "1"}
    assert rankenv.ray_env({"RAY_TRAIN_V2_ENABLED": "1"}) == {}
    with pytest.raises(HarnessError) as e:
        rankenv.ray_env({"RAY_TRAIN_V2_ENABLED": "0"})
    assert e.value.exit_code == 2


def test_nccl_env_only_for_gpu_runs_and_never_overrides():
    assert rankenv.nccl_env(7200, cuda_available=False, env={}) == {}
    assert rankenv.nccl_env(7200, cuda_available=True, env={}) == {"TORCH_NCCL_HEARTBEAT_TIMEOUT_SEC": "7200"}
    assert rankenv.nccl_env(7200, True, {"TORCH_NCCL_HEARTBEAT_TIMEOUT_SEC": "60"}) == {}


def test_patch_default_timeouts_on_real_torch():
    import torch.distributed.distributed_c10d as c10d
    from torch.distributed import Backend

    old = (c10d.default_pg_timeout, c10d.default_pg_nccl_timeout)
    try:
        fixes.patch_default_timeouts(c10d, 9000)
        assert c10d._get_default_timeout(Backend.GLOO) == timedelta(seconds=9000)
        if c10d.default_pg_nccl_timeout is not None:
            assert c10d._get_default_timeout(Backend.NCCL) == timedelta(seconds=9000)
    finally:
        c10d.default_pg_timeout, c10d.default_pg_nccl_timeout = old


def test_explain_known_failures(monkeypatch):
    assert fixes.explain(AssertionError(fixes.RAY_DATA_ASSERT)) == fixes.RAY_DATA_MESSAGE
    assert fixes.explain(ValueError("user bug")) is None
    monkeypatch.setenv("RAY_TRAIN_V2_ENABLED", "0")
    assert fixes.explain(ValueError("'num_workers' ... Received 0")) == fixes.V2_OFF_MESSAGE
