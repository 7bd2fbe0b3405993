#!/usr/bin/env bash
# Builds the GPU check's wheelhouse (docs/gpu-check.md): rtdebug's own wheel and its dependencies' wheels for
# CPython 3.12 on Linux x86_64, in .gpu-wheelhouse/ (git-ignored), for a machine with no network.
#   bash scripts/gpu-bundle.sh        (here, where PyPI is reached; GPU_WHEELHOUSE=DIR puts it elsewhere)
# rtdebug needs debugpy and psutil (pyproject.toml); the versions are the ones this checkout's .venv tests.
# debugpy has platform wheels: the manylinux x86_64 cp312 one; psutil's is abi3. torch is not bundled: the
# GPU machine's own torch with CUDA is used (the check's venv has --system-site-packages).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-.venv/bin/python}
WH=${GPU_WHEELHOUSE:-.gpu-wheelhouse}
PYVER=${GPU_PYTHON_VERSION:-3.12}
MAX_MIB=${GPU_WHEELHOUSE_MAX_MIB:-12}
die() { echo "gpu-bundle: error: $1" >&2; exit "${2:-1}"; }
[ $# -eq 0 ] || { [ "$1" = --help ] || [ "$1" = -h ]; } || die "takes no arguments (see --help)" 2
if [ $# -gt 0 ]; then sed -n '2,7p' "$0" | sed 's/^# \{0,1\}//'; exit 0; fi
[ -x "$PY" ] || die "no $PY: run bash scripts/setup.sh first, or set PYTHON"
versions=$("$PY" -c 'import debugpy, psutil; print(debugpy.__version__, psutil.__version__)') ||
  die "$PY has no debugpy/psutil to take the versions from"
read -r DEBUGPY PSUTIL <<<"$versions"
abi="cp${PYVER/./}"
rm -rf "$WH" && mkdir -p "$WH"
src=$(mktemp -d) && trap 'rm -rf "$src"' EXIT
# built from a copy, so a build/ or egg-info of ours never meets a build someone else runs in the checkout
cp -r pyproject.toml README.md harness "$src/"
find "$src" -name __pycache__ -prune -exec rm -rf {} +
"$PY" -m pip wheel -q --no-deps --no-build-isolation -w "$WH" "$src" || die "building rtdebug's wheel failed"
platforms=()
for p in manylinux_2_34 manylinux_2_28 manylinux_2_17 manylinux2014 manylinux1; do platforms+=(--platform "${p}_x86_64"); done
"$PY" -m pip download -q --no-deps --only-binary=:all: -d "$WH" --python-version "$PYVER" --implementation cp \
  --abi "$abi" "${platforms[@]}" "debugpy==$DEBUGPY" "psutil==$PSUTIL" || die "downloading debugpy $DEBUGPY / psutil $PSUTIL for $abi failed"
ls "$WH"/rtdebug-*-py3-none-any.whl "$WH"/debugpy-*"$abi"*x86_64*.whl "$WH"/psutil-*x86_64*.whl >/dev/null ||
  die "a wheel is missing in $WH"
kib=$(du -sk "$WH" | cut -f1)
[ "$kib" -le $((MAX_MIB * 1024)) ] || die "$WH is $((kib / 1024)) MiB, over $MAX_MIB MiB"
echo "gpu-bundle: $WH ($((kib / 1024)).$(((kib % 1024) * 10 / 1024)) MiB) for CPython $PYVER x86_64:"
ls -1 "$WH" | sed 's/^/  /'
