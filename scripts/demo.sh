#!/usr/bin/env bash
# Quick start 1: set up, then run a real 2-rank Ray Train local-mode job under torchrun with every
# rank ready to attach (the harness prints the rank table and the attach commands).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
exec .venv/bin/rtdebug torchrun --nproc-per-node 2 examples/ddp_fashion.py --epochs "${EPOCHS:-3}" "$@"
