"""The other two ways into a running Python: gdb (where ``rtdebug.inject.ptrace`` cannot run, i.e. not
x86_64, as ``debugpy --pid`` does it) and ``sys.remote_exec`` (3.14+).

Both only queue the code: gdb calls ``Py_AddPendingCall(PyRun_SimpleString, code)`` and nothing else, so
it never waits on the GIL with the thread held (a ``PyGILState_Ensure`` there could wait as long as
another thread's C call holds the GIL); ``sys.remote_exec`` runs the file at the main thread's next eval
break. The cost: a rank whose main thread is blocked in C++ runs the code only once it is back in Python,
so ``rtdebug.inject.runner`` gives up on it after its answer time, cancelling the request. The injected
code (``rtdebug.inject.exchange``'s envelope) never raises, so ``PyRun_SimpleString`` returns 0 and the
pending call does not turn into a ``SystemError`` in the user's code. Files go into the run's private
directory (``Box``), never into a shared ``/tmp``. gdb runs in a session of its own: the terminal's
Ctrl-C reaches only the shell, which waits for gdb's short batch to end (``rtdebug.inject.sigdefer``).
Untested on this project's machines: their gdb 13 cannot restore registers there (``ptrace`` module).
"""

from __future__ import annotations

import os
import secrets
import subprocess
import sys

from rtdebug.common.errors import HarnessError
from rtdebug.inject.exchange import Box


def c_string(text: str) -> str:
    """``text`` as a C string literal (gdb's ``call``)."""
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'


def gdb_script(code: str) -> str:
    """The gdb commands: queue ``code`` as a pending call if the interpreter is up. gdb copies the string
    literal into the process (with its ``malloc``), where it stays until it has run."""
    return (
        "set $init = (int)Py_IsInitialized()\nif $init\n"
        f"  set $r = (int)Py_AddPendingCall((void*)PyRun_SimpleString, {c_string(code)})\n"
        '  printf "RTDEBUG_QUEUED %d\\n", $r\nelse\n  printf "RTDEBUG_NOT_INITIALIZED\\n"\nend\n'
    )


def via_gdb(pid: int, code: str, box: Box) -> None:
    script = box.write(f"gdb-{pid}-{secrets.token_hex(4)}.gdb", gdb_script(code))
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONIOENCODING")}
    opts = ["-iex", "set debuginfod enabled off", "-ex", "set scheduler-locking off"]
    out = subprocess.run(
        ["gdb", "-nx", "-nh", "--batch", *opts, "-p", str(pid), "-x", str(script)],
        capture_output=True, text=True, env=env, timeout=120, start_new_session=True,
    )  # fmt: skip
    if "RTDEBUG_NOT_INITIALIZED" in out.stdout:
        raise HarnessError(f"pid {pid}: its Python is not initialized (yet)")
    if "RTDEBUG_QUEUED 0" not in out.stdout:
        last = (out.stderr.strip().splitlines() or ["no output"])[-1]
        raise HarnessError(f"pid {pid}: gdb could not queue code in it: {last}")


def via_remote_exec(pid: int, code: str, box: Box) -> None:
    path = box.write(f"remote-{pid}-{secrets.token_hex(4)}.py", code)
    sys.remote_exec(pid, str(path))  # type: ignore[attr-defined]  # 3.14+; read at the next eval break
