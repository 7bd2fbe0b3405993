"""Where a named function of a running process lives: its ELF ``.dynsym`` entry plus the mapping's load base.

Enough for the C API that every Python exports to its extension modules (``PyGILState_Ensure``,
``PyRun_SimpleString``): read from the file behind ``/proc/<pid>/maps``, never from the process.
"""

from __future__ import annotations

import functools
import os
import struct
from pathlib import Path

ET_DYN = 3
SHT_DYNSYM = 11


def dynsyms(path: str, names: set[str]) -> tuple[int, dict[str, int]]:
    """(ELF type, {name: st_value}) of the defined functions in ``names`` of the 64-bit ELF at ``path``."""
    data = Path(path).read_bytes()
    if data[:4] != b"\x7fELF" or data[4] != 2:
        return 0, {}
    e_type = struct.unpack_from("<H", data, 16)[0]
    (shoff,) = struct.unpack_from("<Q", data, 0x28)
    shentsize, shnum = struct.unpack_from("<HH", data, 0x3A)
    found: dict[str, int] = {}
    for i in range(shnum):
        sh = struct.unpack_from("<IIQQQQIIQQ", data, shoff + i * shentsize)
        if sh[1] != SHT_DYNSYM:
            continue
        strtab = struct.unpack_from("<IIQQQQIIQQ", data, shoff + sh[6] * shentsize)
        stroff, symoff, count = strtab[4], sh[4], sh[5] // 24
        for j in range(count):
            st_name, _, _, st_shndx, st_value, _ = struct.unpack_from("<IBBHQQ", data, symoff + j * 24)
            if st_shndx == 0 or st_value == 0:
                continue
            end = data.index(b"\0", stroff + st_name)
            name = data[stroff + st_name : end].decode("ascii", "replace")
            if name in names:
                found[name] = st_value
    return e_type, found


def mappings(pid: int) -> list[tuple[int, int, str]]:
    """(start, file offset, path) of each file-backed mapping of ``pid``."""
    out = []
    with open(f"/proc/{pid}/maps") as f:
        for line in f:
            cols = line.split(maxsplit=5)
            if len(cols) == 6 and cols[5].startswith("/"):
                out.append((int(cols[0].split("-")[0], 16), int(cols[2], 16), cols[5].rstrip("\n")))
    return out


def python_image(pid: int) -> str | None:
    """The file that holds the Python C API in ``pid``: its libpython, else its executable."""
    maps = mappings(pid)
    for _, _, path in maps:
        if "/libpython3" in path:
            return path
    for _, _, path in maps:
        if Path(path).name.startswith("python3"):
            return path
    return None


def resolve_c(pid: int, names: set[str]) -> dict[str, int]:
    """Addresses in ``pid`` of the C library functions ``names`` (those found): its libc, then (glibc before
    2.34 keeps ``pthread_create`` there) its libpthread."""
    found: dict[str, int] = {}
    for marks in (("/libc.so", "/libc-", "ld-musl"), ("/libpthread",)):
        image = next((p for _, _, p in mappings(pid) if any(m in p for m in marks)), None)
        if image is not None and names - set(found):
            found.update(resolve(pid, names - set(found), image))
    return found


def _cached(path: str, names: frozenset[str]) -> tuple[int, dict[str, int]]:
    """``dynsyms``, parsed once per file (the ranks of a job share their images; parsing libpython's
    table takes ~10 ms): keyed by the file's identity, so a replaced file is read again."""
    st = os.stat(path)
    return _parsed(path, (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns), names)


@functools.lru_cache(maxsize=16)
def _parsed(path: str, _identity: tuple[int, ...], names: frozenset[str]) -> tuple[int, dict[str, int]]:
    return dynsyms(path, set(names))


def resolve(pid: int, names: set[str], image: str | None = None) -> dict[str, int]:
    """Absolute addresses in ``pid`` of the functions ``names`` (those found) in ``image`` (default: the file
    that holds its Python)."""
    image = image or python_image(pid)
    if image is None:
        return {}
    try:  # the file as the process sees it (another mount namespace), else as we do
        e_type, syms = _cached(f"/proc/{pid}/root{image}", frozenset(names))
    except OSError:  # no access to its root without ptrace rights, or no such file
        e_type, syms = _cached(image, frozenset(names))
    base = 0
    if e_type == ET_DYN:
        base = min((start - off for start, off, path in mappings(pid) if path == image), default=0)
    return {name: base + value for name, value in syms.items()}
