"""Call a C function in another process's main thread with ptrace (x86_64 Linux), as gdb's ``call`` does.

Why not gdb: gdb 13 (Debian 12's) cannot write back the registers of a thread on a CPU whose XSAVE area is
larger than it knows (AMX, Sapphire Rapids on): the kernel wants the whole area, gdb sends 2696 bytes, the
write fails with "Couldn't write extended state status: Bad address" and the target is left corrupted (seen
on this project's machines: ``python -m debugpy --pid`` aborts the target there). This module saves and
restores the whole area, at the size the kernel reports.

How one call goes: seize the thread (``PTRACE_SEIZE`` + ``PTRACE_INTERRUPT``: no SIGSTOP is queued), save
its registers and extended state, point ``rip`` at the function with its argument in ``rdi`` and a return
address of 0 pushed on a stack below the red zone, continue, and wait for the SIGSEGV at address 0 that
the return causes: ``rax`` holds the result. Signals that arrive meanwhile are passed on. Other threads run
throughout. A call never waits on the GIL (``rtdebug.inject.ptrace_call`` chooses only short ones), so
a signal to the shell waits for at most one such call before the thread is put back
(``rtdebug.inject.sigdefer``). Finally the saved state is written back, including ``orig_rax``,
so a system call the thread was blocked in (a C++ collective's futex or poll) is restarted by the kernel as
after any signal, and the thread is detached.
"""

from __future__ import annotations

import ctypes
import errno
import os
import signal
import struct
from typing import Any

PTRACE_CONT, PTRACE_GETREGS, PTRACE_SETREGS, PTRACE_GETFPREGS, PTRACE_SETFPREGS = 7, 12, 13, 14, 15
PTRACE_DETACH, PTRACE_GETREGSET, PTRACE_SETREGSET, PTRACE_SEIZE, PTRACE_INTERRUPT = 17, 0x4204, 0x4205, 0x4206, 0x4207
NT_X86_XSTATE = 0x202
WALL = 0x40000000
REGS = 27  # unsigned longs in struct user_regs_struct
RAX, ORIG_RAX, RIP, RSP = 10, 15, 16, 19
ARGS = (14, 13, 12, 11, 9, 8)  # rdi, rsi, rdx, rcx, r8, r9: the System V integer arguments
XSTATE_MAX = 1 << 16
RESTART = (-512, -513, -514, -516, -4)  # ERESTARTSYS, ERESTARTNOINTR, ERESTARTNOHAND, ERESTART_RESTARTBLOCK, EINTR


class PtraceError(OSError):
    """ptrace refused or the thread went away; ``errno`` says which (EPERM: not allowed)."""


_libc = ctypes.CDLL(None, use_errno=True)
_libc.ptrace.restype = ctypes.c_long
_libc.ptrace.argtypes = [ctypes.c_long, ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p]


class _Iovec(ctypes.Structure):
    _fields_ = [("base", ctypes.c_void_p), ("len", ctypes.c_size_t)]


def _ptrace(req: int, pid: int, addr: int | None = 0, data: Any = None) -> int:
    """``ptrace(2)``; ``data`` is an int (a signal, an address) or a ctypes ``byref`` of a buffer."""
    ctypes.set_errno(0)
    r = _libc.ptrace(req, pid, addr, data)
    err = ctypes.get_errno()
    if r == -1 and err:
        if err == errno.ESRCH and not os.path.exists(f"/proc/{pid}"):
            raise PtraceError(err, f"pid {pid} has ended")
        raise PtraceError(err, f"ptrace({req}) on pid {pid}: {os.strerror(err)}")
    return int(r)


class Tracee:
    """One seized thread (``pid`` = the process's main thread): call functions in it, then ``release``."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        _ptrace(PTRACE_SEIZE, pid)
        try:
            _ptrace(PTRACE_INTERRUPT, pid)
            self._wait_stop()
            self.regs = (ctypes.c_ulong * REGS)()
            _ptrace(PTRACE_GETREGS, pid, 0, ctypes.byref(self.regs))
            self._xstate, self._xlen = self._save_fp()
        except BaseException:
            self._detach()
            raise

    def _save_fp(self) -> tuple[ctypes.Array, int]:
        buf = ctypes.create_string_buffer(XSTATE_MAX)
        iov = _Iovec(ctypes.addressof(buf), XSTATE_MAX)
        try:
            _ptrace(PTRACE_GETREGSET, self.pid, NT_X86_XSTATE, ctypes.byref(iov))
            return buf, int(iov.len)
        except PtraceError:  # no XSAVE: the legacy FXSAVE area (x87 + SSE)
            _ptrace(PTRACE_GETFPREGS, self.pid, 0, ctypes.byref(buf))
            return buf, -1

    def _restore_fp(self) -> None:
        if self._xlen < 0:
            _ptrace(PTRACE_SETFPREGS, self.pid, 0, ctypes.byref(self._xstate))
        else:
            iov = _Iovec(ctypes.addressof(self._xstate), self._xlen)
            _ptrace(PTRACE_SETREGSET, self.pid, NT_X86_XSTATE, ctypes.byref(iov))

    def _wait_stop(self) -> tuple[int, int]:
        """Wait for the next stop: (signal, event); raises if the process ended."""
        while True:
            _, status = os.waitpid(self.pid, WALL)
            if os.WIFEXITED(status) or os.WIFSIGNALED(status):
                raise PtraceError(errno.ESRCH, f"pid {self.pid} has ended")
            if os.WIFSTOPPED(status):
                return os.WSTOPSIG(status), status >> 16

    @property
    def blocked_in_syscall(self) -> bool:
        """The thread was waiting in a system call when stopped (its result is a restart code, or EINTR):
        it is parked at a libc wrapper, not half-way through C code such as an allocation."""
        rax = struct.unpack("<q", struct.pack("<Q", self.regs[RAX]))[0]
        return ctypes.c_long(self.regs[ORIG_RAX]).value >= 0 and rax in RESTART

    def write(self, addr: int, data: bytes) -> None:
        fd = os.open(f"/proc/{self.pid}/mem", os.O_RDWR | os.O_CLOEXEC)
        try:
            os.pwrite(fd, data, addr)
        finally:
            os.close(fd)

    def read(self, addr: int, size: int) -> bytes:
        fd = os.open(f"/proc/{self.pid}/mem", os.O_RDONLY | os.O_CLOEXEC)
        try:
            return os.pread(fd, size, addr)
        finally:
            os.close(fd)

    def stack_below(self, size: int) -> int:
        """An address below the thread's stack pointer and red zone with ``size`` free bytes above it."""
        return (self.regs[RSP] - 256 - size) & ~0xF

    def call(self, func: int, *args: int, below: int | None = None) -> int:
        """Run ``func(*args)`` (up to 6 integer/pointer arguments) in the thread; return ``rax`` as an
        unsigned 64-bit value (``as_int`` for a C ``int`` result)."""
        regs = (ctypes.c_ulong * REGS)(*self.regs)
        sp = ((below if below is not None else self.stack_below(0)) - 4096) & ~0xF
        sp -= 8  # the return address: at function entry rsp + 8 is 16-byte aligned
        self.write(sp, struct.pack("<Q", 0))
        regs[RSP], regs[RIP], regs[RAX] = sp, func, 0
        for index, value in zip(ARGS, args, strict=False):
            regs[index] = value & 0xFFFFFFFFFFFFFFFF
        regs[ORIG_RAX] = ctypes.c_ulong(-1).value  # not in a system call: the kernel restarts nothing
        _ptrace(PTRACE_SETREGS, self.pid, 0, ctypes.byref(regs))
        deliver = 0
        while True:
            _ptrace(PTRACE_CONT, self.pid, 0, deliver)
            sig, event = self._wait_stop()
            deliver = 0
            if event:  # a group stop or our own interrupt: go on
                continue
            if sig in (signal.SIGSEGV, signal.SIGBUS):
                _ptrace(PTRACE_GETREGS, self.pid, 0, ctypes.byref(regs))
                if regs[RIP] == 0:
                    return int(regs[RAX])
            deliver = sig  # someone else's signal: pass it on

    def release(self) -> None:
        """Put the thread back exactly as it was (registers, FP/vector state) and detach; a process that has
        ended meanwhile has nothing to put back."""
        try:
            _ptrace(PTRACE_SETREGS, self.pid, 0, ctypes.byref(self.regs))
            self._restore_fp()
        except PtraceError as exc:
            if exc.errno != errno.ESRCH:
                raise
        finally:
            self._detach()

    def _detach(self) -> None:
        try:
            _ptrace(PTRACE_DETACH, self.pid, 0, 0)
        except PtraceError:
            pass


def as_int(rax: int) -> int:
    """A C ``int`` result: the low 32 bits of ``rax``, sign-extended."""
    return int(struct.unpack("<i", struct.pack("<I", rax & 0xFFFFFFFF))[0])
