"""A torch-free rank whose GIL a C call holds for as long as a test wants: for interrupting `rtdebug adopt`.

`python adopt_gil.py CONTROL [thread|main]` starts one rank of itself with torchrun's RANK/LOCAL_RANK/
WORLD_SIZE set. The rank's main thread loops (checked arithmetic, 1 ms sleeps) until CONTROL appears. When
the FIFO CONTROL.gil appears, a C call takes the GIL and keeps it: ``read`` through ``ctypes.PyDLL`` (which
does not release the GIL, as a C extension doing blocking I/O may not) on that FIFO, until the test writes
a byte into it. ``thread``: another thread makes that call while the main thread waits for the GIL (in a
system call); ``main``: the main thread makes it itself. It says "holding the GIL" just before the call
and "released the GIL" after it. Exit 0 only if the arithmetic stayed right (a register left wrong by an
injection would show here).
"""

import ctypes
import os
import subprocess
import sys
import threading
import time


def hold(fifo: str) -> None:
    fd = os.open(fifo, os.O_RDWR)  # read+write (Linux): opens at once, and a read blocks until a byte comes
    buf = ctypes.create_string_buffer(1)
    libc = ctypes.PyDLL(None)  # PyDLL: the GIL stays held during the call
    print("gil rank 0 holding the GIL", flush=True)
    libc.read(fd, buf, 1)
    os.close(fd)
    print("gil rank 0 released the GIL", flush=True)


def rank_main(control: str, where: str) -> int:
    print(f"gil rank 0 pid {os.getpid()} running", flush=True)
    total, n, held = 0, 0, False
    while not os.path.exists(control):
        n += 1
        total += n * 3
        if not held and os.path.exists(control + ".gil"):
            held = True
            if where == "main":
                hold(control + ".gil")
            else:
                threading.Thread(target=hold, args=(control + ".gil",), daemon=True).start()
        time.sleep(0.001)
    ok = total == 3 * n * (n + 1) // 2
    print(f"gil rank 0 done after {n} steps: {'ok' if ok else 'WRONG'}", flush=True)
    return 0 if ok else 3


def main() -> int:
    control, where = sys.argv[1], (sys.argv[2] if len(sys.argv) > 2 else "thread")
    if "RANK" in os.environ:
        return rank_main(control, where)
    env = dict(os.environ, RANK="0", LOCAL_RANK="0", WORLD_SIZE="1")
    return subprocess.Popen([sys.executable, __file__, control, where], env=env).wait()


if __name__ == "__main__":
    sys.exit(main())
