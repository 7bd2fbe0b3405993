#!/usr/bin/env bash
# Create .venv (if missing) and install the harness with torch, Ray, the test tools and the linters.
# pyproject.toml states version ranges; constraints/ci.txt pins what this machine tests
# (torch 2.13.0's CPU build from local disk, ray 2.60.0).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
# rtdebug adopt injects with gdb where its own ptrace injector does not run (not x86_64); tests use it too.
if ! command -v gdb >/dev/null 2>&1 && command -v apt-get >/dev/null 2>&1; then
  SUDO=$([ "$(id -u)" = 0 ] && echo "" || echo "sudo -n")
  $SUDO apt-get update -q >/dev/null && $SUDO apt-get install -y -q gdb >/dev/null || echo "setup: could not install gdb (rtdebug adopt on non-x86_64 needs it)"
fi
# rtdebug connect runs the system's ssh; its tests start real sshd's in network namespaces.
if { ! command -v ssh >/dev/null 2>&1 || [ ! -x /usr/sbin/sshd ]; } && command -v apt-get >/dev/null 2>&1; then
  SUDO=$([ "$(id -u)" = 0 ] && echo "" || echo "sudo -n")
  $SUDO apt-get update -q >/dev/null && $SUDO apt-get install -y -q openssh-server openssh-client >/dev/null || echo "setup: could not install openssh (rtdebug connect's tests need it)"
fi
if [ ! -x .venv/bin/python ]; then
  "$PY" -m venv .venv
fi
.venv/bin/python -m pip install -q --upgrade pip 2>/dev/null || true
# torch's CPU build (the pin's +cpu) is on PyTorch's own index, not PyPI's: a machine whose pip already has a
# wheel directory or index of its own (pip config's find-links) uses that; any other gets PyTorch's CPU index.
# RTDEBUG_TORCH_INDEX= (empty) turns the extra index off; set it to use another.
EXTRA=()
PIP_CONFIG=$(.venv/bin/python -m pip config list 2>/dev/null || true)   # read whole: grep -q would cut the pipe
if [[ "$PIP_CONFIG" != *find-links* ]]; then
  INDEX=${RTDEBUG_TORCH_INDEX-https://download.pytorch.org/whl/cpu}
  [ -n "$INDEX" ] && EXTRA=(--extra-index-url "$INDEX")
fi
.venv/bin/python -m pip install -q -c constraints/ci.txt ${EXTRA[@]+"${EXTRA[@]}"} -e '.[torch,ray,test,lint,stacks]'
.venv/bin/python -c 'import torch, ray, debugpy; print("setup ok: torch", torch.__version__, "ray", ray.__version__, "debugpy", debugpy.__version__)'
