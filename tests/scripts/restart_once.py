"""A torch-free rank program for torchrun restarts (``--max-restarts 1``): in the first attempt rank 1 exits 1
once ``GO`` exists (torchrun then restarts every rank: new processes); in the next, every rank runs until
``CONTROL`` exists, then exits 0.

    restart_once.py GO CONTROL
"""

import os
import sys
import time

go, control = sys.argv[1], sys.argv[2]
rank, attempt = int(os.environ["RANK"]), int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0"))
print(f"rank {rank} attempt {attempt} pid {os.getpid()} running", flush=True)
while not os.path.exists(control):
    if attempt == 0 and rank == 1 and os.path.exists(go):
        sys.exit(1)
    time.sleep(0.05)
sys.exit(0)
