"""Dump a process whose threads start and end all the time, many times; say whether it lived.

    python churn_torture.py DIR N thread   # N dumps through the rank's dump thread (the real path)
    python churn_torture.py DIR N signal   # up to N signal-time faulthandler dumps (the fallback), as control

The churner (this script with ``churn``) arms rtdebug's dump in itself, then loops: a new
ThreadPoolExecutor every step, plus short-lived plain threads. The requester is ``rtdebug.stacks.collect``'s
own ``ask`` / ``Asked.read``. Prints one JSON line: dumps answered, whether the churner is alive, its
exit status if not. Stdlib + the torch-free harness: it runs on every supported Python.
"""

import json
import os
import signal
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path


def churn(d: Path) -> None:
    from rtdebug.rank.stacks import dump

    info = dump.arm(d, 0)
    (d / "info.json").write_text(json.dumps(info))
    n = 0
    while True:
        with ThreadPoolExecutor(max_workers=3) as pool:
            list(pool.map(lambda x: x * x, range(6)))
        t = threading.Thread(target=lambda: None)
        t.start()
        t.join()
        n += 1


def main() -> int:
    d, n, mode = Path(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
    if mode == "churn":
        churn(d)
        return 0
    child = subprocess.Popen([sys.executable, __file__, str(d), "0", "churn"])
    deadline = time.monotonic() + 60
    while not (d / "info.json").exists():
        if time.monotonic() > deadline or child.poll() is not None:
            print(json.dumps({"error": "the churner never armed", "exit": child.poll()}))
            child.kill()
            return 1
        time.sleep(0.01)
    info = json.loads((d / "info.json").read_text())
    entry = {"rank": 0, "pid": child.pid, "stacks": info}
    done = 0
    try:
        if mode == "thread":
            from rtdebug.stacks.collect import ask

            for _ in range(n):
                a = ask(d, entry)
                if a is None:
                    break
                until = time.monotonic() + 30
                got = None
                while got is None and time.monotonic() < until and child.poll() is None:
                    got = a.read()
                    if got is None:
                        time.sleep(0.001)
                if got is None:
                    break
                done += 1
        else:
            for _ in range(n):
                if child.poll() is not None:
                    break
                os.kill(child.pid, info["signal"])
                done += 1
                time.sleep(0.002)
        time.sleep(0.2)
        alive = child.poll() is None
        print(json.dumps({"dumps": done, "alive": alive, "exit": child.returncode}))
    finally:
        if child.poll() is None:
            child.send_signal(signal.SIGKILL)
        child.wait()
    return 0


if __name__ == "__main__":
    sys.exit(main())
