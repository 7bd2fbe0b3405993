"""Rank 1 exits at once; rank 0 stays up for a while (argv[1] seconds, default 60)."""

import os
import sys
import time

if os.environ["RANK"] == "0":
    time.sleep(float(sys.argv[1]) if len(sys.argv) > 1 else 60)
