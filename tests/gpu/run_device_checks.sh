#!/usr/bin/env bash
# Device checks for a machine with an NVIDIA GPU, in one run, under 10 minutes:
#   1. build xputune's CUDA copy kernels                     (xputune kernels build)
#   2. check every copy operator against a numpy reference   (xputune kernels selftest)
#   3. copy bandwidth of the kernels next to one cudaMemcpy of the same bytes on pinned host
#      memory (torch's copy_ from/to pin_memory() buffers), layer_first, 32K MLA tokens
#                                                            (xputune bench copy --device torch)
#   4. the real-server lane (tests/server) with --device cuda: the same scenarios and
#      assertions as on CPU (host round trip, count-once, ghost list, LIFO/async/kernels, TP 2
#      when two GPUs are visible, bad switch)
# Usage (from the repository root, in an environment where torch sees the GPU and
# sglang 0.5.20 with its CUDA dependencies is installed; nothing is downloaded):
#   PYTHON=/path/to/python tests/gpu/run_device_checks.sh [OUT_DIR]
# Every step's output goes to OUT_DIR (default: $OUT, else ./device-checks); the exit status is
# non-zero when any step failed. Each step has its own time limit (budget: 9.5 minutes).
set -uo pipefail
cd "$(dirname "$0")/../.."
PY="${PYTHON:-.venv/bin/python}"
OUTDIR="${1:-${OUT:-device-checks}}"
mkdir -p "$OUTDIR"
status=0
t_start=$(date +%s)

step() {  # step NAME SECONDS CMD...
    local name=$1 limit=$2
    shift 2
    local t0
    t0=$(date +%s)
    echo "== $name (limit ${limit}s): $*"
    timeout --kill-after=15 "$limit" "$@" >"$OUTDIR/$name.log" 2>&1
    local rc=$?
    echo "   rc=$rc in $(( $(date +%s) - t0 ))s; last lines:"
    tail -n 15 "$OUTDIR/$name.log" | sed 's/^/   | /'
    if [ "$rc" -ne 0 ]; then status=1; fi
    return "$rc"
}

echo "python: $PY"
if ! "$PY" - <<'PYEOF' >"$OUTDIR/env.log" 2>&1; then
import torch, sys
print("torch", torch.__version__, "cuda", torch.version.cuda, "devices", torch.cuda.device_count())
for i in range(torch.cuda.device_count()):
    print(i, torch.cuda.get_device_name(i))
sys.exit(0 if torch.cuda.is_available() else 1)
PYEOF
    cat "$OUTDIR/env.log"
    echo "torch does not see a CUDA device from $PY: nothing to check here"
    exit 2
fi
cat "$OUTDIR/env.log"
command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,memory.total,pcie.link.gen.current,pcie.link.width.current --format=csv >"$OUTDIR/nvidia-smi.csv" 2>&1

step kernels-build 150 "$PY" -m xputune kernels build --force --format json
step kernels-selftest 90 "$PY" -m xputune kernels selftest --rounds 20 --format json
step copy-bench 90 "$PY" -m xputune bench copy --device torch --tokens 32768 --layers 1 \
    --item-size 1152 --layout layer_first --repeats 9 --format json

if "$PY" -c 'import importlib.metadata as m, sys; sys.exit(m.version("sglang") != "0.5.20")' 2>/dev/null; then
    XPUTUNE_SERVER_DEVICE=cuda XPUTUNE_SERVER_LAUNCH_ARGS="--force" \
    XPUTUNE_SERVER_REPORT="$PWD/$OUTDIR/server-lane.json" \
        step server-lane 330 "$PY" -m pytest -q -p no:cacheprovider -m server tests/server \
            -o addopts="" --timeout 300
else
    echo "== server-lane: skipped: sglang 0.5.20 is not installed for $PY"
    status=1
fi

echo "device checks: $(( $(date +%s) - t_start ))s in all, status $status, logs in $OUTDIR"
exit "$status"
