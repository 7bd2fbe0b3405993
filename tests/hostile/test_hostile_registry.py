"""The registry is the owner's alone: a foreign or open root is refused, and no entry field becomes a path.

Part of the hostile-input campaign (beside tests/hostile/test_hostile_port.py and tests/hostile/test_hostile_stores.py):
every file in a registry may be forged, so each case checks that nothing is deleted, nothing crashes and
one line says what was wrong.
"""

from __future__ import annotations

import json
import os

import pytest

from rtdebug import cli
from rtdebug.common.errors import HarnessError
from rtdebug.registry.files import Registry
from rtdebug.registry.liveness import prune, reserve_session

from support.entries import rank, session
from support.procs import dead_pid


def test_a_session_id_that_walks_out_of_the_registry_deletes_nothing(tmp_path, monkeypatch, capsys):
    root, victim = tmp_path / "reg", tmp_path / "victimdir"
    victim.mkdir()
    (victim / "keep.txt").write_text("mine")
    reg = Registry(root)
    reg.ensure()
    forged = dict(session("s1"), session_id="../victimdir", launcher_pid=dead_pid(), ended_at=1.0)
    (root / "s1").mkdir(mode=0o700)
    (root / "s1" / "session.json").write_text(json.dumps(forged))
    monkeypatch.setenv("RTDEBUG_REGISTRY_DIR", str(root))
    assert cli.main(["ps", "--all"]) == 0
    err = capsys.readouterr().err.strip().splitlines()
    why = "session id '../victimdir' is not a valid session id"
    assert err == [f"rtdebug: warning: unreadable registry entry {root}/s1/session.json: {why}"]
    assert (victim / "keep.txt").read_text() == "mine"
    assert cli.main(["stop", "--session", "../victimdir"]) == 2
    assert capsys.readouterr().err.splitlines()[-1] == (
        "rtdebug: error: argument --session: invalid session id '../victimdir'; see `rtdebug ps`"
    )
    assert victim.exists()


def test_an_entry_that_names_another_session_is_unreadable_not_followed(tmp_path):
    reg = Registry(tmp_path / "reg")
    reserve_session(reg, session("a"))
    reserve_session(reg, session("b", ports=(6100, 6101)))
    (tmp_path / "reg" / "a" / "session.json").write_text(json.dumps(session("b", ports=(6100, 6101))))
    reg.write_rank(rank("b", r=0))
    (tmp_path / "reg" / "b" / "rank-1.json").write_text(json.dumps(rank("b", r=0)))
    assert [s["session_id"] for s in prune(reg)] == ["b"]
    assert [r["rank"] for r in reg.ranks("b")] == [0]
    assert sorted(p.name for p in reg.unreadable) == ["rank-1.json", "session.json"]


def test_an_entry_of_the_other_kind_is_one_warning_never_a_crash(tmp_path, monkeypatch, capsys):
    """A rank entry where the session's file is (it names no launcher) and a session entry where a rank's file
    is (it names no rank): each is read as the kind its path says, so each is unreadable, named once."""
    root = tmp_path / "reg"
    reg = Registry(root)
    reserve_session(reg, session("a"))
    reserve_session(reg, session("b", ports=(6100, 6101)))
    (root / "a" / "session.json").write_text(json.dumps(rank("a", r=0)))
    (root / "b" / "rank-0.json").write_text(json.dumps(session("b", ports=(6100, 6101))))
    monkeypatch.setenv("RTDEBUG_REGISTRY_DIR", str(root))
    assert cli.main(["ps", "--all"]) == 0
    out, err = capsys.readouterr()
    assert "session a " not in out and "session b  torchrun" in out
    assert err.strip().splitlines() == [
        f"rtdebug: warning: unreadable registry entry {root}/a/session.json: not a session entry",
        f"rtdebug: warning: unreadable registry entry {root}/b/rank-0.json: not a rank entry",
    ]


@pytest.mark.parametrize("case", ["foreign owner", "open to others"])
def test_a_root_that_is_not_the_owners_alone_is_refused(tmp_path, monkeypatch, capsys, case):
    root = tmp_path / "reg"
    reg = Registry(root)
    reserve_session(reg, dict(session("s1"), launcher_pid=dead_pid()))
    if case == "foreign owner":
        os.chown(root, 65534, 65534)
        want = (
            f"rtdebug: error: registry {root} belongs to uid 65534, not to you (uid {os.geteuid()}); "
            "remove it or point RTDEBUG_REGISTRY_DIR at a directory of your own"
        )
    else:
        os.chmod(root, 0o777)
        want = f"rtdebug: error: registry {root} is open to other users (mode 0o777); run: chmod 700 {root}"
    monkeypatch.setenv("RTDEBUG_REGISTRY_DIR", str(root))
    for argv in (["ps"], ["stop", "--all"], ["attach", "--rank", "0", "--timeout", "1"]):
        assert cli.main(argv) == 1
        assert capsys.readouterr().err.strip() == want
    with pytest.raises(HarnessError):
        reserve_session(reg, session("s2", ports=(6200, 6201)))
    assert (root / "s1" / "session.json").exists()  # nothing pruned, nothing written
    assert json.loads((root / "s1" / "session.json").read_text())["state"] == "running"


def test_a_symlinked_root_is_refused_even_to_the_owners_own_directory(tmp_path, monkeypatch, capsys):
    real = tmp_path / "real"
    Registry(real).ensure()
    link = tmp_path / "link"
    link.symlink_to(real)
    monkeypatch.setenv("RTDEBUG_REGISTRY_DIR", str(link))
    for argv in (["ps"], ["stacks"], ["attach", "--rank", "0", "--timeout", "1"]):
        assert cli.main(argv) == 1
        assert capsys.readouterr().err.strip() == (
            f"rtdebug: error: registry {link} is a symbolic link; point RTDEBUG_REGISTRY_DIR at the real "
            f"directory ({real})"
        )
    with pytest.raises(HarnessError):
        reserve_session(Registry(link), session("s1"))
    assert list(real.iterdir()) == []  # no session was made through the link


def test_a_symlink_on_the_way_that_another_user_owns_is_refused(tmp_path):
    (tmp_path / "theirs").mkdir()
    hop = tmp_path / "hop"
    hop.symlink_to(tmp_path / "theirs")
    os.lchown(hop, 65534, 65534)
    reg = Registry(hop / "reg")
    with pytest.raises(HarnessError, match=f"registry {hop}/reg: {hop} is a symbolic link owned by uid 65534"):
        reg.ensure()


@pytest.mark.parametrize("kind", ["fifo", "symlink", "huge"])
def test_an_entry_that_is_a_fifo_a_symlink_or_huge_is_one_warning_never_a_hang(tmp_path, monkeypatch, capsys, kind):
    root = tmp_path / "reg"
    reg = Registry(root)
    reserve_session(reg, dict(session("s1"), launcher_pid=dead_pid(), ended_at=1.0))
    entry = root / "s1" / "session.json"
    entry.unlink()
    if kind == "fifo":
        os.mkfifo(entry, 0o600)
        why = "not a regular file"
    elif kind == "symlink":
        (tmp_path / "elsewhere.json").write_text(json.dumps(session("s1")))
        entry.symlink_to(tmp_path / "elsewhere.json")
        why = "a symbolic link"
    else:
        entry.write_bytes(b" " * ((1 << 20) + 1))
        why = f"{(1 << 20) + 1} bytes, more than an entry ever is ({1 << 20})"
    monkeypatch.setenv("RTDEBUG_REGISTRY_DIR", str(root))
    assert cli.main(["ps", "--all"]) == 0  # a FIFO opened without O_NONBLOCK would block here for ever
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"rtdebug: warning: unreadable registry entry {entry}: {why}"]


def test_stacks_never_truncates_through_a_symlinked_dump_file(tmp_path):
    from rtdebug.stacks import collect

    victim = tmp_path / "victim"
    victim.write_text("precious")
    (tmp_path / "stacks-0.txt").symlink_to(victim)
    with pytest.raises(OSError):
        collect._truncate(tmp_path / "stacks-0.txt")
    assert victim.read_text() == "precious"
