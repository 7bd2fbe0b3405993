"""A file written whole or not at all, one way: the registry's entries, a rank's entry in an adopted job, a
dump thread's answer, a session's secret.

The bytes go to a fresh temp name beside the file (``.tmp-<random>.<name>``), created ``O_EXCL|O_NOFOLLOW``
and made 0600 whatever the umask (never an existing file, never through a link planted at that name), then
renamed over the file: a reader sees the old file or the new one, never half of one. Relative to a directory
fd where the caller holds one it checked (``dir_fd``), so a directory swapped for a link after the check
changes nothing. A temp is removed if anything fails; one left by a writer that died is swept by
``rtdebug.registry.liveness`` (the ``.tmp-`` prefix).

Not here, on purpose: the default job secret is linked, never renamed, into place (the first of several
nodes on a shared home wins, ``rtdebug.registry.signing``); the answer of code injected into a rank is
stdlib-only source run there (``rtdebug.inject.exchange``).
"""

from __future__ import annotations

import contextlib
import os
import secrets

TMP_PREFIX = ".tmp-"
FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC


def write(path: str | os.PathLike[str], data: bytes, *, dir_fd: int | None = None, mode: int = 0o600) -> None:
    """``data`` as the file ``path`` (a name relative to ``dir_fd``, where given), whole or not at all."""
    head, name = os.path.split(os.fspath(path))
    tmp = os.path.join(head, f"{TMP_PREFIX}{secrets.token_hex(8)}.{name}")
    fd = os.open(tmp, FLAGS, mode, dir_fd=dir_fd)
    try:
        try:
            os.fchmod(fd, mode)  # exactly ``mode``, whatever the umask
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
        finally:
            os.close(fd)
        os.replace(tmp, path, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp, dir_fd=dir_fd)
        raise
