import pytest

from rtdebug.common.config import RankConfig, Target
from rtdebug.common.errors import HarnessError


def test_rank_config_round_trips_through_env():
    cfg = RankConfig(
        session_id="s", port_base=7000, wait="0,2", eager=True, post_mortem=True, pg_timeout_s=30, registry_dir="/tmp/x"
    )
    back = RankConfig.from_env(cfg.to_env())
    assert back == cfg
    assert back.waits(0) and not back.waits(1) and back.waits(2)
    assert RankConfig(session_id="s", wait="all").waits(99)


@pytest.mark.parametrize(
    "kwargs, msg",
    [
        ({"port_base": 0}, "--debug-port-base 0"),
        ({"pg_timeout_s": 0}, "--pg-timeout"),
        ({"wait": "x"}, "invalid --wait"),
    ],
)
def test_rank_config_checks(kwargs, msg):
    with pytest.raises(HarnessError) as e:
        RankConfig(session_id="s", **kwargs)
    assert msg in str(e.value) and e.value.exit_code == 2


def test_from_env_needs_session():
    with pytest.raises(HarnessError, match="RTDEBUG_SESSION is not set"):
        RankConfig.from_env({})
    with pytest.raises(HarnessError, match="bad RTDEBUG_"):
        RankConfig.from_env({"RTDEBUG_SESSION": "s", "RTDEBUG_PORT_BASE": "abc"})


def test_target_checks(tmp_path):
    with pytest.raises(HarnessError, match="script not found"):
        Target(str(tmp_path / "nope.py"))
    with pytest.raises(HarnessError, match="invalid module name"):
        Target("-x", module=True)
    assert Target("pkg.mod", module=True).display == "-m pkg.mod"
