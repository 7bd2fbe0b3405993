"""Put Python source into a running process by ptrace (x86_64), never waiting on its GIL with a thread held.

The process's main thread is stopped (``rtdebug.inject.ptrace``) and made to call a few C functions, each
short and none waiting on the GIL; then its registers are put back and it is detached. Two ways, by where
the thread was stopped (``PyGILState_Check()`` and the kernel's view of the thread):

- it holds the GIL, or was stopped outside a system call (half-way through C code that may hold a lock
  the code would need: malloc's, an exception being raised): ``Py_AddPendingCall`` queues the code, and
  the interpreter runs it between two bytecodes, at once in a busy rank, or when the thread is next back
  in Python. Running it right there could corrupt the interpreter (seen on 3.13 as a ``SystemError``).
- it waits in a system call without the GIL (a C++ collective, ``time.sleep``, I/O, or waiting *for* the
  GIL while another thread holds it in a long C call): ``pthread_create`` starts a thread of the rank's
  own that takes the GIL as any C thread does (``PyGILState_Ensure``), runs the code and ends.

So the held thread never waits on the GIL (an earlier ``PyGILState_Ensure`` on the held thread waited
as long as another thread's 20 s regex held the GIL, and a shell killed meanwhile left the rank to return
to address 0); the new thread may wait, but it holds nothing of ours and stops no one. The calls made
while the thread is held: ``Py_IsInitialized``, ``PyGILState_Check``, ``mmap``, ``mprotect``, then
``Py_AddPendingCall`` (its lock is held by others for a few instructions) or ``pthread_create`` and
``pthread_detach``; the guard (``rtdebug.inject.sigdefer``) is checked before each.

The code and a small trampoline go into a fresh mapping (the trampoline's page made read+execute only once
written): the pending entry calls ``PyRun_SimpleString`` and returns 0 whatever it returned (a pending call
that returns -1 without an exception set raises ``SystemError`` in the user's code); the thread entry does
``PyGILState_Ensure``/``PyRun_SimpleString``/``PyGILState_Release``. Both end by a tail call to
``munmap`` of their own mapping, so nothing of ours stays in the process.
"""

from __future__ import annotations

import contextlib
import signal
import struct

from rtdebug.common.errors import HarnessError
from rtdebug.inject import elfsyms, ptrace
from rtdebug.inject.sigdefer import Guard, Interrupted

C_API = ("Py_IsInitialized", "PyGILState_Check", "PyGILState_Ensure", "PyGILState_Release", "PyRun_SimpleString",
         "Py_AddPendingCall")  # fmt: skip
LIBC = ("mmap", "mprotect", "munmap", "pthread_create", "pthread_detach")
PAGE = 4096
MAX_CODE = 1 << 16
ARGS = 64  # the argument block, then the code
PROT_RW, PROT_RX, MAP_PRIVATE_ANON = 3, 5, 0x22
THREAD_ENTRY, PENDING_ENTRY = 0x00, 0x40
# The argument block (rdi -> rbx): +0 PyGILState_Ensure, +8 PyRun_SimpleString, +16 PyGILState_Release,
# +24 the code, +32 the mapping, +40 its size, +48 munmap. Assembled from (intel syntax):
# thread:  push rbx; mov rbx,rdi; call [rbx]; push rax; sub rsp,8; mov rdi,[rbx+24]; call [rbx+8];
#          add rsp,8; pop rdi; call [rbx+16]; mov rdi,[rbx+32]; mov rsi,[rbx+40]; mov rax,[rbx+48];
#          pop rbx; jmp rax
# pending: push rbx; mov rbx,rdi; mov rdi,[rbx+24]; call [rbx+8]; mov rdi,[rbx+32]; mov rsi,[rbx+40];
#          mov rax,[rbx+48]; pop rbx; jmp rax            (munmap returns 0: the pending call's result)
THREAD_CODE = bytes.fromhex(
    "53 4889fb ff13 50 4883ec08 488b7b18 ff5308 4883c408 5f ff5310 488b7b20 488b7328 488b4330 5b ffe0"
)
PENDING_CODE = bytes.fromhex("53 4889fb 488b7b18 ff5308 488b7b20 488b7328 488b4330 5b ffe0")
TRAMPOLINE = THREAD_CODE.ljust(PENDING_ENTRY, b"\xcc") + PENDING_CODE


def missing(pid: int) -> list[str]:
    """The functions this needs that ``pid`` does not export (a Python without symbols, an odd C library)."""
    found = set(elfsyms.resolve(pid, set(C_API))) | set(elfsyms.resolve_c(pid, set(LIBC)))
    return sorted(set(C_API + LIBC) - found)


class _Held:
    """One held thread: each call first checks the guard (the thread is put back by the caller's ``release``)."""

    def __init__(self, tracee: ptrace.Tracee, guard: Guard) -> None:
        self.t, self.guard = tracee, guard

    def __call__(self, func: int, *args: int, below: int | None = None) -> int:
        if self.guard.stop.is_set():
            raise Interrupted(self.guard.signum or signal.SIGINT)
        return self.t.call(func, *args, below=below)


def inject(pid: int, code: str, guard: Guard) -> str:
    """Have ``pid`` run ``code`` (see the module docstring); "pending" or "thread", the way it went in."""
    data = code.encode() + b"\0"
    if len(data) > MAX_CODE:
        raise HarnessError(f"pid {pid}: the code to inject is too long ({len(data)} bytes)")
    api, libc = elfsyms.resolve(pid, set(C_API)), elfsyms.resolve_c(pid, set(LIBC))
    if len(api) < len(C_API) or len(libc) < len(LIBC):
        raise HarnessError(f"pid {pid} exports no {', '.join(missing(pid))}")
    t = ptrace.Tracee(pid)
    try:
        call = _Held(t, guard)
        if ptrace.as_int(call(api["Py_IsInitialized"])) == 0:
            raise HarnessError(f"pid {pid}: its Python is not initialized (yet)")
        thread = ptrace.as_int(call(api["PyGILState_Check"])) != 1 and t.blocked_in_syscall
        size = PAGE + -(-(ARGS + len(data)) // PAGE) * PAGE
        page = call(libc["mmap"], 0, size, PROT_RW, MAP_PRIVATE_ANON, -1, 0)
        if page >= 1 << 63:
            raise HarnessError(f"pid {pid}: mmap failed in it (errno {-(page - (1 << 64))})")
        placed = _place(t, call, api, libc, page, size, data, thread)
        if not placed:
            raise HarnessError(f"pid {pid}: its pending-call queue is full; try again")
        return "thread" if thread else "pending"
    finally:
        t.release()


def _place(t: ptrace.Tracee, call: _Held, api: dict[str, int], libc: dict[str, int], page: int, size: int,
           data: bytes, thread: bool) -> bool:  # fmt: skip
    """Fill the mapping and start the thread or queue the call; False: the queue is full. On any failure
    before the code is placed, the mapping is unmapped again: nothing of ours stays behind."""
    placed = False
    try:
        t.write(page, TRAMPOLINE)
        blob = struct.pack("<7Q", api["PyGILState_Ensure"], api["PyRun_SimpleString"], api["PyGILState_Release"],
                           page + PAGE + ARGS, page, size, libc["munmap"])  # fmt: skip
        t.write(page + PAGE, blob.ljust(ARGS, b"\0") + data)
        if ptrace.as_int(call(libc["mprotect"], page, PAGE, PROT_RX)) != 0:
            raise HarnessError(f"pid {t.pid}: mprotect failed in it (a policy forbids executable memory?)")
        if thread:
            slot = t.stack_below(16)  # pthread_create writes the new thread's id here
            err = ptrace.as_int(call(libc["pthread_create"], slot, 0, page + THREAD_ENTRY, page + PAGE, below=slot))
            if err != 0:
                raise HarnessError(f"pid {t.pid}: it could not start a thread (error {err})")
            placed = True  # the thread runs on the mapping now: it unmaps it itself
            (tid,) = struct.unpack("<Q", t.read(slot, 8))
            t.call(libc["pthread_detach"], tid, below=slot)  # even when stopped: nothing is left to join
        else:
            placed = ptrace.as_int(call(api["Py_AddPendingCall"], page + PENDING_ENTRY, page + PAGE)) == 0
    finally:
        if not placed:
            with contextlib.suppress(OSError):
                t.call(libc["munmap"], page, size)
    return placed
