"""The one atomic file write (``rtdebug.common.atomic``): whole or not at all, 0600, never through a link, fd-relative
where the caller holds a directory fd; and no other module renames a file into place itself."""

from __future__ import annotations

import ast
import os

import pytest

from rtdebug.common import atomic

from support.paths import ROOT


def _names(d) -> list[str]:
    return sorted(os.listdir(d))


def test_written_whole_0600_over_the_old_file_and_no_temp_left(tmp_path):
    path = tmp_path / "entry.json"
    path.write_text("old")
    old_umask = os.umask(0o022)
    try:
        atomic.write(path, b"new" * 100000)
    finally:
        os.umask(old_umask)
    assert path.read_bytes() == b"new" * 100000
    assert path.stat().st_mode & 0o777 == 0o600
    assert _names(tmp_path) == ["entry.json"]


def test_relative_to_a_directory_fd_even_once_its_path_names_another(tmp_path):
    d, other = tmp_path / "session", tmp_path / "elsewhere"
    d.mkdir()
    other.mkdir()
    fd = os.open(d, os.O_RDONLY | os.O_DIRECTORY)
    try:
        d.rename(tmp_path / "moved")
        d.symlink_to(other)  # the path now leads elsewhere: the fd still names the directory that was checked
        atomic.write("rank-0.json", b"{}", dir_fd=fd)
    finally:
        os.close(fd)
    assert (tmp_path / "moved" / "rank-0.json").read_bytes() == b"{}"
    assert _names(other) == []


def test_a_link_at_the_name_is_replaced_never_written_through(tmp_path):
    target = tmp_path / "root-owned"
    target.write_text("keep")
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "stacks-0.json").symlink_to(target)
    atomic.write(tmp_path / "d" / "stacks-0.json", b"answer")
    assert target.read_text() == "keep"
    assert not (tmp_path / "d" / "stacks-0.json").is_symlink()
    assert (tmp_path / "d" / "stacks-0.json").read_bytes() == b"answer"


def test_a_planted_temp_name_is_refused_and_its_target_untouched(tmp_path, monkeypatch):
    target = tmp_path / "root-owned"
    target.write_text("keep")
    (tmp_path / f".tmp-{'f' * 16}.entry.json").symlink_to(target)
    with monkeypatch.context() as m, pytest.raises(FileExistsError):
        m.setattr(atomic.secrets, "token_hex", lambda n: "f" * (2 * n))  # the name another user guessed
        atomic.write(tmp_path / "entry.json", b"x")
    assert target.read_text() == "keep" and not (tmp_path / "entry.json").exists()


def test_a_failed_write_leaves_the_old_file_and_no_temp(tmp_path, monkeypatch):
    path = tmp_path / "entry.json"
    path.write_text("old")

    def full(fd, data):
        raise OSError(28, "No space left on device")

    with monkeypatch.context() as m, pytest.raises(OSError, match="No space left"):
        m.setattr(atomic.os, "write", full)  # (the os module itself: only for this call)
        atomic.write(path, b"new")
    assert path.read_text() == "old" and _names(tmp_path) == ["entry.json"]


def test_no_other_module_renames_a_file_into_place():
    """The temp-file-and-rename write exists once. (``inject/exchange.py``'s rank-side answer is stdlib-only
    source run in the rank, a string here; the default secret is linked into place, never renamed.)"""
    renamers = set()
    for path in sorted((ROOT / "harness" / "rtdebug").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
                f = node.func
                if f.attr in ("replace", "rename") and isinstance(f.value, ast.Name) and f.value.id == "os":
                    renamers.add(str(path.relative_to(ROOT)))
    assert renamers == {"harness/rtdebug/common/atomic.py"}, renamers
