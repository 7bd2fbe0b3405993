"""A torch-free job for `rtdebug adopt` on any Python: this process starts 2 ranks of itself with torchrun's
RANK/LOCAL_RANK/WORLD_SIZE set; each runs a busy pure-Python loop (checked arithmetic) until CONTROL appears.

`python adopt_plain.py CONTROL`; exit 0 only if every rank's arithmetic stayed right (an injection that
corrupted a register would show here).
"""

import os
import subprocess
import sys
import time


def rank_main(control: str) -> int:
    rank = int(os.environ["RANK"])
    print(f"plain rank {rank} pid {os.getpid()} running", flush=True)
    total, n = 0, 0
    while not os.path.exists(control):
        n += 1
        total += n * rank  # BREAKPOINT: plain step
        if n % 1000 == 0:
            time.sleep(0.001)
    expected = rank * n * (n + 1) // 2
    print(f"plain rank {rank} done after {n} steps: {'ok' if total == expected else 'WRONG'}", flush=True)
    return 0 if total == expected else 3


def main() -> int:
    control = sys.argv[1]
    if "RANK" in os.environ:
        return rank_main(control)
    procs = [
        subprocess.Popen(
            [sys.executable, __file__, control], env=dict(os.environ, RANK=str(r), LOCAL_RANK=str(r), WORLD_SIZE="2")
        )  # fmt: skip
        for r in range(2)
    ]
    return max(p.wait() for p in procs)


if __name__ == "__main__":
    sys.exit(main())
