"""A rank that keeps stepping in pure Python and writes its step count to argv[1].

``--take-signal`` installs a Python handler for the dump's signal first, as a program
that owns that signal would: then only the rank's dump thread can answer.
``--hold-gil`` makes the main thread, after 100 steps, spend ~20 s in one C call that keeps
the GIL (a backtracking regular expression; a signal does not end it, as it would a sleep):
then the dump thread cannot answer either.
"""

import os
import signal
import sys
import threading
import time

if "--take-signal" in sys.argv:
    from rtdebug.stacks.contract import SIGNAL

    signal.signal(SIGNAL, lambda s, f: None)

fd = os.open(sys.argv[1], os.O_WRONLY | os.O_CREAT, 0o600)


def idle_helper():
    while True:
        time.sleep(0.5)  # BREAKPOINT: stepper helper


def step(n):
    total = 0
    for i in range(2000):  # BREAKPOINT: stepper step
        total += i * n
    return total


threading.Thread(target=idle_helper, name="helper", daemon=True).start()
n = 0
while True:
    step(n)
    n += 1
    if n % 50 == 0:
        os.pwrite(fd, b"%12d\n" % n, 0)
    if n == 100 and "--hold-gil" in sys.argv:
        import re

        os.pwrite(fd, b"%12d\n" % -1, 0)  # -1: the GIL is held from now on
        re.match(r"(a+)+$", "a" * 29 + "b")
