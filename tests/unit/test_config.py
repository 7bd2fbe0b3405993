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


def test_all_stop_is_on_unless_the_flags_or_the_environment_say_off():
    """``--no-all-stop`` / ``--no-continue-all`` reach the ranks as ``=0``; with neither flag nothing is set,
    so the job's own environment (``RTDEBUG_ALL_STOP=0``) still decides, and the default is on."""
    from rtdebug import cli
    from rtdebug.commands.run import RunOptions
    from rtdebug.commands.torchrun import TorchrunOptions

    on = RankConfig(session_id="s")
    assert (on.all_stop, on.continue_all) == (True, True)
    assert "RTDEBUG_ALL_STOP" not in on.to_env() and "RTDEBUG_CONTINUE_ALL" not in on.to_env()
    off = RankConfig(session_id="s", all_stop=False, continue_all=False)
    assert {k: v for k, v in off.to_env().items() if "ALL" in k and k != "RTDEBUG_ALLOW"} == {
        "RTDEBUG_ALL_STOP": "0",
        "RTDEBUG_CONTINUE_ALL": "0",
    }
    assert RankConfig.from_env(off.to_env()) == off
    assert not RankConfig.from_env({"RTDEBUG_SESSION": "s", "RTDEBUG_ALL_STOP": " Off"}).all_stop

    ns = cli.build_parser("torchrun").parse_args(["torchrun", "--no-all-stop", "--nproc-per-node", "2", "t.py"])
    debug = TorchrunOptions.from_args(ns).debug
    assert debug is not None and (debug.all_stop, debug.continue_all) == (False, True)
    assert debug.rank_config("s", host="127.0.0.1", wait="none").to_env()["RTDEBUG_ALL_STOP"] == "0"
    run = RunOptions.from_args(cli.build_parser("run").parse_args(["run", "--no-continue-all", "t.py"]))
    assert (run.all_stop, run.continue_all) == (True, False)
