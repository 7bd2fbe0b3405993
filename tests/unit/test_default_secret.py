"""The per-user default job secret (``rtdebug.registry.signing.default_secret``): one owner-only file under
the user's config directory, made once by the first launcher that needs it, so every node of a job on a
shared home signs with the same secret and no setup. A file anyone else could read or swap is refused in
one line, never used. (Two nodes sharing it, or not: tests/e2e/test_multinode.py.)"""

from __future__ import annotations

import os
import stat
import subprocess

import pytest

from rtdebug.common.errors import HarnessError
from rtdebug.registry import signing

from support.paths import PY


def test_made_once_owner_only_where_xdg_or_home_says(tmp_path, monkeypatch, own_config_dir):
    monkeypatch.delenv(signing.ENV_SECRET, raising=False)
    monkeypatch.delenv(signing.ENV_SECRET_FILE, raising=False)
    path = own_config_dir / "rtdebug" / signing.SECRET_FILE
    assert signing.default_secret() is None and signing.known_secrets() == []  # a reader never makes one
    made = signing.job_secret()
    assert made is not None and len(made) == 64 and int(made, 16) >= 0
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700 and stat.S_IMODE(path.stat().st_mode) == 0o600
    assert signing.job_secret() == made == signing.default_secret() and signing.known_secrets() == [made]
    assert os.listdir(path.parent) == [signing.SECRET_FILE]  # no temp file left
    # the user's own secret comes first and makes nothing; the reader knows both
    monkeypatch.setenv(signing.ENV_SECRET, "user-given-secret-0123456789")
    assert signing.job_secret() == "user-given-secret-0123456789"
    assert signing.known_secrets() == ["user-given-secret-0123456789", made]
    # no (or a relative) XDG_CONFIG_HOME: ~/.config/rtdebug
    home = tmp_path / "home"
    for xdg in ("", "relative/dir"):
        env = {"HOME": str(home), "XDG_CONFIG_HOME": xdg}
        assert signing.config_dir(env) == home / ".config" / "rtdebug"
    assert signing.shown(home / ".config" / "rtdebug", {"HOME": str(home)}) == "~/.config/rtdebug"
    # where nothing can be made, None (the launcher then makes a random per-job secret)
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    assert signing.default_secret(create=True, env={"XDG_CONFIG_HOME": str(blocker / "sub")}) is None


def test_launchers_racing_on_a_shared_home_agree(tmp_path):
    """Every node's launcher starts at once on one home: the first link wins, all read the winner's."""
    env = dict(os.environ, HOME=str(tmp_path / "home"), XDG_CONFIG_HOME="")
    env.pop(signing.ENV_SECRET, None)
    env.pop(signing.ENV_SECRET_FILE, None)
    code = "from rtdebug.registry import signing; print(signing.job_secret())"
    procs = [subprocess.Popen([PY, "-c", code], env=env, stdout=subprocess.PIPE, text=True) for _ in range(6)]
    got = {p.communicate(timeout=60)[0].strip() for p in procs}
    assert len(got) == 1 and len(next(iter(got))) == 64, got
    d = tmp_path / "home" / ".config" / "rtdebug"
    assert os.listdir(d) == [signing.SECRET_FILE] and (d / signing.SECRET_FILE).read_text().strip() in got


def _plant(path, how: str) -> None:
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    if how == "fifo":
        os.mkfifo(path, 0o600)
    elif how == "directory":
        path.mkdir(mode=0o700)
    elif how == "symlink":
        target = path.parent / "elsewhere"
        target.write_text("a" * 64)
        target.chmod(0o600)
        path.symlink_to(target)
    else:
        path.write_text("short" if how == "short" else "a" * 64)
        path.chmod({"group-readable": 0o640, "other-readable": 0o604}.get(how, 0o600))
        if how == "someone else's":
            os.chown(path, 65534, 65534)


@pytest.mark.parametrize(
    "how, why",
    [
        ("group-readable", "not a file of yours, mode 0600 (chmod 600 "),
        ("other-readable", "not a file of yours, mode 0600 (chmod 600 "),
        ("someone else's", "not a file of yours, mode 0600 (chmod 600 "),
        ("directory", "not a file of yours, mode 0600 (chmod 600 "),
        ("fifo", "not a file of yours, mode 0600 (chmod 600 "),  # opened without blocking, then refused
        ("symlink", "a symbolic link (remove it to make a new one)"),
        ("short", "shorter than 16 characters (remove it)"),
    ],
)
def test_a_default_secret_anyone_else_could_read_or_swap_is_refused_in_one_line(
    how, why, own_config_dir, monkeypatch, tmp_path
):
    if how == "someone else's" and os.getuid() != 0:
        pytest.skip("giving a file to another uid needs root")
    monkeypatch.delenv(signing.ENV_SECRET, raising=False)
    path = own_config_dir / "rtdebug" / signing.SECRET_FILE
    _plant(path, how)
    want = f"refused the default job secret {path}: {why}"
    for call in (signing.default_secret, signing.job_secret, signing.known_secrets):
        with pytest.raises(HarnessError) as exc:
            call()
        assert str(exc.value).startswith(want), str(exc.value)
    env = dict(os.environ, RTDEBUG_REGISTRY_DIR=str(tmp_path / "reg"))
    r = subprocess.run(
        [PY, "-m", "rtdebug", "stacks", "--store", "127.0.0.1:1"], env=env, capture_output=True, text=True, timeout=60
    )
    assert r.returncode == 1 and r.stderr.startswith(f"rtdebug: error: {want}"), r.stderr
    assert len(r.stderr.strip().splitlines()) == 1 and "Traceback" not in r.stderr
