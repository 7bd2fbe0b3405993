"""``--capture`` / ``rtdebug replay``'s settings: RankConfig round trip, each one-line refusal, the launcher's
capsule folder (made, never written over), and the options reaching RankConfig through the real parsers."""

import os

import pytest

from rtdebug import cli
from rtdebug.common.config import LaunchFacts, RankConfig, Target
from rtdebug.common.errors import HarnessError
from rtdebug.launcher import capture


def test_capture_and_replay_fields_round_trip_through_env():
    facts = LaunchFacts("torchrun", "/job/t.py", False, ["--lr", "1"], "/job", "1", 2, ["--nproc-per-node", "2"], "s")
    cap = RankConfig(session_id="s", capture_dir="/c", capture_ranks="0,2-3", capture_max_gb=0.5, launch=facts)
    assert RankConfig.from_env(cap.to_env()) == cap
    rep = RankConfig(
        session_id="s",
        replay_dir="/c",
        replay_check=False,
        replay_tolerance=1e-3,
        replay_stop_at=57,
        replay_scratch="/c/scratch/rank-1",
    )
    back = RankConfig.from_env(rep.to_env())
    assert back == rep and not back.replay_check and back.replay_stop_at == 57
    off = RankConfig(session_id="s").to_env()
    assert not any(k.startswith(("RTDEBUG_CAPTURE", "RTDEBUG_REPLAY")) for k in off)


@pytest.mark.parametrize(
    "kwargs, msg",
    [
        ({"capture_ranks": "1"}, "--capture-ranks needs --capture DIR"),
        ({"capture_max_gb": 2.0}, "--capture-max-gb needs --capture DIR"),
        ({"capture_dir": "/c", "capture_max_gb": -1.0}, "--capture-max-gb must be >= 0 GB (0: no limit), got -1"),
        ({"capture_dir": "/c", "capture_ranks": "x"}, "invalid --capture-ranks value 'x'"),
        ({"capture_dir": "/c", "capture_ranks": "none"}, "--capture-ranks 'none' selects no rank"),
        ({"capture_dir": "/c", "capture_ranks": "tp=0"}, "mesh coordinates are known only after capture"),
        ({"capture_dir": "/c", "replay_dir": "/c"}, "a replay cannot capture"),
        ({"replay_dir": "/c", "replay_tolerance": -1.0}, "--check-tolerance must be a number >= 0"),
        ({"replay_dir": "/c", "replay_stop_at": -2}, "--stop-at-collective must be >= 1"),
    ],
)
def test_each_bad_setting_is_one_line(kwargs, msg):
    with pytest.raises(HarnessError) as e:
        RankConfig(session_id="s", **kwargs)
    assert msg in e.value.message and "\n" not in e.value.message and e.value.exit_code == 2


def test_a_bad_launch_variable_is_one_line():
    with pytest.raises(HarnessError, match="bad RTDEBUG_"):
        RankConfig.from_env({"RTDEBUG_SESSION": "s", "RTDEBUG_CAPTURE": "/c", "RTDEBUG_CAPTURE_LAUNCH": "[1]"})
    with pytest.raises(HarnessError, match="bad RTDEBUG_"):
        RankConfig.from_env({"RTDEBUG_SESSION": "s", "RTDEBUG_CAPTURE": "/c", "RTDEBUG_CAPTURE_LAUNCH": '{"x": 1}'})


def test_the_capsule_folder_is_made_and_a_captured_rank_never_written_over(tmp_path):
    where = tmp_path / "a" / "capsule"
    assert capture.prepare(str(where), [0, 1], "", 2) == str(where)
    assert where.is_dir() and (where.stat().st_mode & 0o777) == 0o700
    (where / "rank-1").mkdir()
    with pytest.raises(HarnessError, match="it already holds a capture of rank 1; pick a new folder"):
        capture.prepare(str(where), [0, 1], "", 2)
    assert capture.prepare(str(where), [0, 1], "0", 2) == str(where)  # rank 1 is not captured this time
    (tmp_path / "f").write_text("")
    with pytest.raises(HarnessError, match="not a directory"):
        capture.prepare(str(tmp_path / "f"), [0], "", 1)
    with pytest.raises(HarnessError, match="rank 4 >= world size 2"):
        capture.prepare(str(tmp_path / "b"), [0, 1], "4", 2)
    assert not (tmp_path / "b").exists()  # refused before anything was made


def test_a_capsule_folder_others_can_write_is_refused(tmp_path):
    """A replay trusts what a capsule holds: a folder others can write to is refused in one line (readable is
    fine: a capsule is shared to be replayed elsewhere), as the registry refuses such a root."""
    where = tmp_path / "shared"
    where.mkdir()
    where.chmod(0o777)
    with pytest.raises(HarnessError) as exc:
        capture.prepare(str(where), [0], "", 1)
    assert str(exc.value) == f"--capture {where}: other users can write to it (mode 0o777); run: chmod go-w {where}"
    assert exc.value.exit_code == 2 and not (where / "rank-0").exists()
    where.chmod(0o755)
    assert capture.prepare(str(where), [0], "", 1) == str(where)


@pytest.mark.skipif(os.geteuid() != 0, reason="making a folder another user owns needs root")
def test_a_capsule_folder_of_another_user_is_refused(tmp_path):
    where = tmp_path / "theirs"
    where.mkdir(mode=0o700)
    os.chown(where, 4242, 4242)
    with pytest.raises(HarnessError) as exc:
        capture.prepare(str(where), [0], "", 1)
    assert str(exc.value) == (
        f"--capture {where}: the folder belongs to uid 4242, not to you (uid 0); a replay trusts what a capsule "
        "holds: pick a folder of your own"
    )
    link = tmp_path / "link"
    link.symlink_to(tmp_path / "mine")
    (tmp_path / "mine").mkdir(mode=0o700)
    os.lchown(link, 4242, 4242)
    with pytest.raises(HarnessError, match="a symbolic link owned by uid 4242; give the real folder"):
        capture.prepare(str(link), [0], "", 1)


def test_launch_facts_are_absolute(tmp_path, monkeypatch):
    script = tmp_path / "t.py"
    script.write_text("")
    monkeypatch.chdir(tmp_path)
    facts = capture.launch_facts("torchrun", Target("t.py", ["--x"]), "sid", "1", 2, ["--nproc-per-node", "2"])
    assert facts.script == str(script) and facts.cwd == str(tmp_path) and facts.argv == ["--x"]
    assert LaunchFacts.from_json(facts.to_json()) == facts
    assert capture.launch_facts("run", Target("json.tool", module=True), "sid").script == "json.tool"


@pytest.mark.parametrize(
    "argv, msg",
    [
        (["torchrun", "--capture-ranks", "1", "--nproc-per-node", "2", "T"], "--capture-ranks needs --capture DIR"),
        (["torchrun", "--nproc-per-node", "2", "--capture", "C", "--capture-ranks", "2", "T"], "rank 2 >= world"),
        (["run", "--capture-max-gb", "1", "T"], "--capture-max-gb needs --capture DIR"),
        (
            ["run", "--capture", "C", "--capture-max-gb", "-3", "T"],
            "--capture-max-gb must be >= 0 GB (0: no limit), got -3",
        ),
    ],
)
def test_the_cli_refuses_in_one_line_and_makes_nothing(argv, msg, tmp_path, capsys, monkeypatch):
    script = tmp_path / "t.py"
    script.write_text("print('ran')\n")
    monkeypatch.setenv("RTDEBUG_REGISTRY_DIR", str(tmp_path / "reg"))
    argv = [str(script) if a == "T" else str(tmp_path / "cap") if a == "C" else a for a in argv]
    assert cli.main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("rtdebug: error: ") and msg in err, err
    assert not (tmp_path / "cap").exists() and not os.path.exists(tmp_path / "reg" / "x")


def test_capsule_lists_missing_ranks_as_ranges():
    from rtdebug.commands.capsule import ranges

    assert ranges([9, 0, 1, 2, 3, 5, 7, 8, 1023]) == "0-3,5,7-9,1023"
    assert ranges([]) == "" and ranges([4]) == "4" and ranges(list(range(1, 1024))) == "1-1023"


def test_a_node_refuses_only_the_captures_of_itsown_ranks(tmp_path):
    """Static rendezvous: node 1 of 2 x 2 runs ranks 2-3, so a shared folder holding rank 0 is not in its way;
    a dynamic rendezvous knows no node rank yet and refuses none."""
    from rtdebug.commands.options import torchrun_parser
    from rtdebug.launcher.start import own_ranks
    from rtdebug.launcher.torchrun import plan_torchrun

    script = tmp_path / "t.py"
    script.write_text("")

    def own(*tokens: str) -> list[int]:
        return own_ranks(plan_torchrun(torchrun_parser().parse_args([*tokens, str(script)]), [*tokens, str(script)]))

    static = ("--nnodes", "2", "--nproc-per-node", "2", "--master-addr", "127.0.0.1", "--master-port", "29999")
    assert own(*static, "--node-rank", "1") == [2, 3]
    assert own("--nnodes", "2", "--nproc-per-node", "2", "--rdzv-backend", "c10d", "--rdzv-endpoint", "h:1") == []
    (tmp_path / "cap" / "rank-0").mkdir(parents=True)
    assert capture.prepare(str(tmp_path / "cap"), own(*static, "--node-rank", "1"), "", 4) == str(tmp_path / "cap")
