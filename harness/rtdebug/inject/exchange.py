"""Where code injected into a rank (``rtdebug.inject.runner``) takes its request and leaves its answer.

Not in ``/tmp``: a late injected call once wrote ``<dir>/<pid>.json.tmp`` with ``O_CREAT|O_TRUNC`` into a
``/tmp`` directory that adopt had already deleted and another user had made again, full of symlinks, and
overwrote a root-owned file. So each run gets a directory of its own, made 0700 inside the owner's
registry root (the caller passes it, checked: ``Registry.ensure``), named ``.inject-<shell pid>-<random>``
(never a session id: those begin with a letter or digit). The shell works relative to fds on the root
and on that directory; the code in the rank opens the directory by path once, checks that it is that very
directory (device and inode, taken when it was made), the rank's uid's, 0700, and from then on works only
relative to that fd, creating with ``O_EXCL|O_NOFOLLOW``. Nothing is ever truncated.

One request per pid, and each step is one that only one side can win:

- ``<pid>.req``, made by the shell. The rank *takes* it by unlinking it; the shell *cancels* it by unlinking
  it. Code that runs after the shell gave up (a pending call queued behind a GIL that C code held for a
  minute) finds it gone and does nothing at all: it writes nothing and changes nothing. Detach code is the
  exception (``unasked``): undoing an adoption is always wanted, so it runs anyway, but answers no one.
- ``<pid>.tmp`` renamed to ``<pid>.json``: the rank's answer, whole.
- a shell that gives up on a request the rank has taken makes ``<pid>.json`` a directory first, so the
  rank's rename fails (a file cannot replace a directory); the rank then undoes what it did (an adoption
  detaches itself). If the shell's ``mkdir`` finds the answer there, it reads it instead.

Leftovers: the shell removes its directory however it ends, SIGKILL aside, except a request it gave up
on after the rank had taken it: its ``<pid>.json`` directory must outlive the rank's attempt to answer, so
that directory stays (with the session adopt keeps, stopped, for that rank's last entry). A later run
removes the directories of shells that are gone once they are an hour old.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import stat
import time
from pathlib import Path
from typing import Any

DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
PREFIX = ".inject-"
MAX_ANSWER = 1 << 20
SWEEP_AFTER_S = 3600.0

# Runs in the rank, stdlib only (Python 3.10+), from exec() in a fresh namespace; PATH, DEV, INO, NAME,
# BODY and UNASKED are set above it. BODY sets ``result`` (a JSON object) and may set ``undo``.
ENVELOPE = """
import os


def _take():
    try:
        fd = os.open(PATH, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return None, False
    st = os.fstat(fd)
    if (st.st_dev, st.st_ino) != (DEV, INO) or st.st_uid != os.geteuid() or st.st_mode & 0o077:
        os.close(fd)
        return None, False
    try:
        os.unlink(NAME + ".req", dir_fd=fd)
    except OSError:
        return fd, False
    return fd, True


def _deliver(fd, result):
    import json

    tmp = NAME + ".tmp"
    try:
        data = json.dumps(result).encode()
        out = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600, dir_fd=fd)
        try:
            while data:
                data = data[os.write(out, data):]
        finally:
            os.close(out)
        os.rename(tmp, NAME + ".json", src_dir_fd=fd, dst_dir_fd=fd)
        return True
    except (OSError, TypeError, ValueError):
        try:
            os.unlink(tmp, dir_fd=fd)
        except OSError:
            pass
        return False


def _main():
    fd, taken = _take()
    try:
        if not taken and not UNASKED:
            return
        ns = {}
        try:
            exec(BODY, ns)
            result = ns.get("result")
        except BaseException as exc:
            result = {"status": "error", "error": f"{type(exc).__name__}: {exc}"}
        if not taken or _deliver(fd, result):
            return
        undo = ns.get("undo")
        if undo is not None:
            undo()
    finally:
        if fd is not None:
            os.close(fd)


try:
    _main()
except BaseException:
    pass
"""


def _owned_private(st: os.stat_result, what: str) -> None:
    if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.geteuid() or st.st_mode & 0o077:
        raise OSError(f"{what} is not a directory of yours alone (0700)")


def _empty(fd: int, markers: bool) -> None:
    """Remove the files a box holds, and (``markers``) the directories that mark requests given up."""
    for name in os.listdir(fd):
        try:
            os.unlink(name, dir_fd=fd)
        except IsADirectoryError:
            if markers:
                with contextlib.suppress(OSError):
                    os.rmdir(name, dir_fd=fd)
        except OSError:
            pass


def _sweep(root_fd: int) -> None:
    """Boxes of shells that are gone (SIGKILLed, or kept for a marker) and an hour old: removed."""
    for name in os.listdir(root_fd):
        pid = name[len(PREFIX) :].partition("-")[0]
        if not name.startswith(PREFIX) or not pid.isdigit() or int(pid) == os.getpid():
            continue
        try:
            os.kill(int(pid), 0)
            continue
        except ProcessLookupError:
            pass
        except OSError:
            continue
        try:
            fd = os.open(name, DIR_FLAGS, dir_fd=root_fd)
        except OSError:
            continue
        try:
            if time.time() - os.fstat(fd).st_mtime > SWEEP_AFTER_S:
                _empty(fd, markers=True)
        finally:
            os.close(fd)
        with contextlib.suppress(OSError):
            os.rmdir(name, dir_fd=root_fd)


class Box:
    """This run's private directory under ``parent`` (the owner's registry root); see the module docstring."""

    def __init__(self, parent: Path) -> None:
        self.root_fd = os.open(parent, DIR_FLAGS)
        try:
            _owned_private(os.fstat(self.root_fd), str(parent))
            _sweep(self.root_fd)
            self.name = f"{PREFIX}{os.getpid()}-{secrets.token_hex(4)}"
            os.mkdir(self.name, 0o700, dir_fd=self.root_fd)
            self.fd = os.open(self.name, DIR_FLAGS, dir_fd=self.root_fd)
        except BaseException:
            os.close(self.root_fd)
            raise
        st = os.fstat(self.fd)
        self.dev, self.ino = st.st_dev, st.st_ino
        self.path = Path(parent) / self.name

    def __enter__(self) -> Box:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Remove the directory and everything in it (a rank that answers after this answers no one), but
        for the markers of requests given up after their rank had taken them (see the module docstring)."""
        if self.fd < 0:
            return
        _empty(self.fd, markers=False)  # a marker must outlive the rank's attempt to answer
        os.close(self.fd)
        self.fd = -1
        with contextlib.suppress(OSError):
            os.rmdir(self.name, dir_fd=self.root_fd)
        os.close(self.root_fd)

    def request(self, pid: int) -> None:
        os.close(os.open(f"{pid}.req", os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600, dir_fd=self.fd))

    def code(self, pid: int, body: str, unasked: bool = False) -> str:
        """The Python source to run in ``pid``: ``body`` inside the envelope that takes the request and answers."""
        head = (
            f"PATH, DEV, INO, NAME, BODY, UNASKED = {(str(self.path), self.dev, self.ino, str(pid), body, unasked)!r}"
        )
        return f"exec({head + ENVELOPE!r}, {{}})"

    def answer(self, pid: int) -> dict[str, Any] | None:
        """The rank's answer, once it is there whole (a JSON object), else None."""
        try:
            fd = os.open(f"{pid}.json", os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=self.fd)
        except OSError:
            return None
        try:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                return None
            data = os.read(fd, MAX_ANSWER)
        finally:
            os.close(fd)
        try:
            value = json.loads(data)
        except ValueError:
            return {"status": "error", "error": "its answer is not JSON"}
        return value if isinstance(value, dict) else {"status": "error", "error": "its answer is not an object"}

    def give_up(self, pid: int) -> tuple[str, dict[str, Any] | None]:
        """Stop waiting for ``pid``: ("cancelled", None) if its code had not taken the request (it will do
        nothing), ("taken", None) if it had (it undoes its work when done), ("answered", answer)."""
        try:
            os.unlink(f"{pid}.req", dir_fd=self.fd)
            return "cancelled", None
        except FileNotFoundError:
            pass
        try:
            os.mkdir(f"{pid}.json", 0o700, dir_fd=self.fd)
            return "taken", None
        except FileExistsError:
            return "answered", self.answer(pid)

    def write(self, name: str, text: str) -> Path:
        """A file of this run's (a gdb script, code for ``sys.remote_exec``), 0600; its path."""
        fd = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600, dir_fd=self.fd)
        with os.fdopen(fd, "w") as f:
            f.write(text)
        return self.path / name
