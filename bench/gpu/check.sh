#!/usr/bin/env bash
# bench/gpu/check.sh - the node profiler on a real NVIDIA GPU machine, in under 5 minutes, offline.
#
# Inventories the GPU(s) (UUID, serial, PCI, memory, power limit, driver, CUDA, ECC, retired
# pages), runs each benchmark (GEMM fp16/fp32, STREAM triad, ResNet-50 training step) on every
# GPU at once with NVML telemetry, and prints scores, clocks and throttle reasons.
#
# The machine may have no internet: the script uses what is installed and says what is missing.
# It tries `pip install` only for what is missing (nvidia-ml-py; cupy when neither cupy nor
# torch is there), with no retries and a short timeout, from bench/gpu/wheels/ when that holds
# wheels (then with --no-index), into a throwaway venv that still sees the system's packages.
#
# Usage: bench/gpu/check.sh            (from anywhere; run as any user)
# Environment: PYTHON (interpreter to use), PAL_CHECK_BUDGET (timed seconds per benchmark, 10),
#   PAL_CHECK_TIMEOUT (hard limit per benchmark program, 60), PAL_CHECK_NO_PIP=1 (never pip),
#   PAL_CHECK_OUT (results directory, /tmp), PAL_CHECK_DEV_DIR (device directory, /dev).
# Exit: 0 all benchmarks ran; 1 a benchmark failed/timed out or a GPU fault; 2 no NVIDIA GPU;
#   3 nothing failed but benchmarks were skipped (no cupy/torch); 4 no usable Python.
# Worst case: 4 benchmarks x PAL_CHECK_TIMEOUT (60 s) + ~30 s of set-up stays under 5 minutes.
set -uo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO=$(cd "$HERE/../.." && pwd)
BUDGET=${PAL_CHECK_BUDGET:-10}
TIMEOUT=${PAL_CHECK_TIMEOUT:-60}
OUT=${PAL_CHECK_OUT:-/tmp}
DEV_DIR=${PAL_CHECK_DEV_DIR:-/dev}
START=$(date +%s)

say() { printf '%s\n' "$*"; }
elapsed() { echo $(( $(date +%s) - START )); }

# -- 1. an NVIDIA GPU? ---------------------------------------------------------------------------
shopt -s nullglob
devices=("$DEV_DIR"/nvidia[0-9]*)
shopt -u nullglob
if [ ${#devices[@]} -eq 0 ] && ! command -v nvidia-smi >/dev/null 2>&1; then
  say "check.sh: no NVIDIA GPU on this machine (no $DEV_DIR/nvidia0, no nvidia-smi): nothing to check"
  exit 2
fi
say "== GPUs (${#devices[@]} device files)"
CUDA_MAJOR=12
if command -v nvidia-smi >/dev/null 2>&1; then
  nvidia-smi -L 2>&1 | sed 's/^/  /'
  header=$(nvidia-smi 2>/dev/null | grep -o 'CUDA Version: [0-9.]*' || true)
  say "  ${header:-CUDA Version: unknown}"
  case "$header" in *"Version: 11."*) CUDA_MAJOR=11 ;; esac
else
  say "  nvidia-smi: not installed"
fi

# -- 2. a Python >= 3.11 (what pal_slurm needs) --------------------------------------------------
PY=""
ANY_PY=""
for cand in "${PYTHON:-}" python3 python3.13 python3.12 python3.11 python; do
  if [ -z "$cand" ] || ! command -v "$cand" >/dev/null 2>&1; then continue; fi
  [ -n "$ANY_PY" ] || ANY_PY=$cand
  if "$cand" -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else 1)' 2>/dev/null; then
    PY=$cand
    break
  fi
done
if [ -z "$ANY_PY" ]; then
  say "check.sh: no Python on this machine: the benchmark programs need python3 with cupy or torch"
  exit 4
fi
has() { "$1" -c "import importlib.util, sys; sys.exit(0 if importlib.util.find_spec('$2') else 1)" 2>/dev/null; }

# -- 3. missing packages: try to install, offline-tolerant ----------------------------------------
if [ -n "$PY" ] && [ "${PAL_CHECK_NO_PIP:-0}" != 1 ]; then
  want=()
  has "$PY" pynvml || want+=(nvidia-ml-py)
  if ! has "$PY" cupy && ! has "$PY" torch; then want+=("cupy-cuda${CUDA_MAJOR}x"); fi
  if [ ${#want[@]} -gt 0 ]; then
    say "== missing: ${want[*]}; trying pip (no retries, 5 s timeout)"
    venv="$OUT/pal-check-venv"
    if "$PY" -m venv --system-site-packages "$venv" >/dev/null 2>&1; then
      PY="$venv/bin/python"
    else
      say "  cannot create a venv (python3-venv missing?): not installing into the system Python"
      want=()
    fi
    src=()
    if compgen -G "$HERE/wheels/*.whl" >/dev/null; then src=(--no-index --find-links "$HERE/wheels"); fi
    for pkg in "${want[@]}"; do
      if timeout 120 "$PY" -m pip install --disable-pip-version-check -q --retries 0 --timeout 5 "${src[@]}" \
          "$pkg" >"$OUT/pal-check-pip.log" 2>&1; then
        say "  $pkg: installed"
      else
        say "  $pkg: NOT installed ($(tail -n 1 "$OUT/pal-check-pip.log" | cut -c1-150))"
      fi
    done
  fi
fi

# -- 4. the check ---------------------------------------------------------------------------------
if [ -n "$PY" ]; then
  say "== running bench/gpu/check.py with $("$PY" --version 2>&1) ($(elapsed) s so far)"
  "$PY" "$HERE/check.py" --time-budget "$BUDGET" --timeout "$TIMEOUT" --output "$OUT/pal-gpu-check.jsonl"
  rc=$?
  say "== check.sh done in $(elapsed) s, exit $rc"
  exit $rc
fi

# No Python >= 3.11: run the standalone benchmark programs directly (they need Python 3.8+ and
# cupy or torch), pinned to each GPU in turn, with nvidia-smi sampling clocks and reasons.
say "== no Python >= 3.11 ($("$ANY_PY" --version 2>&1)): pal_slurm cannot run; benchmark programs only"
if ! command -v nvidia-smi >/dev/null 2>&1; then
  say "check.sh: needs nvidia-smi for this fallback"; exit 4
fi
reasons=clocks_event_reasons.active
nvidia-smi --query-gpu=$reasons --format=csv,noheader >/dev/null 2>&1 || reasons=clocks_throttle_reasons.active
nvidia-smi --query-gpu=index,uuid,name,serial,pci.bus_id,memory.total,power.limit,driver_version,vbios_version \
  --format=csv 2>&1 | sed 's/^/  /'
rc=0
mapfile -t uuids < <(nvidia-smi --query-gpu=uuid --format=csv,noheader)
for spec in "gemm.py --dtype fp16" "gemm.py --dtype fp32" "stream.py" "train_step.py"; do
  read -r -a prog <<<"$spec"
  for i in "${!uuids[@]}"; do
    samples="$OUT/pal-check-smi-$i.csv"
    nvidia-smi --query-gpu=clocks.sm,clocks.mem,power.draw,temperature.gpu,$reasons --format=csv,noheader,nounits \
      --id="$i" -lms 500 >"$samples" 2>/dev/null &
    smi=$!
    line=$(CUDA_VISIBLE_DEVICES=${uuids[$i]} timeout "$TIMEOUT" "$ANY_PY" "$REPO/profiler/${prog[0]}" \
      "${prog[@]:1}" --time-budget "$BUDGET" 2>/dev/null | tail -n 1)
    status=$?
    kill "$smi" 2>/dev/null; wait "$smi" 2>/dev/null
    [ $status -eq 0 ] || [ $status -eq 3 ] || rc=1
    say "  GPU $i ${spec}: ${line:-no result (exit $status)}"
    sort -t, -k1,1n "$samples" | awk -F', *' 'NF >= 5 { n++; c[n] = $1; if ($4 > t) t = $4; r[$5] = 1 }
      END { if (n) { printf "    SM clock median %s MHz (min %s), max %s C, reasons seen:", c[int((n + 1) / 2)], c[1], t;
            for (k in r) printf " %s", k; print "" } }'
  done
done
say "== check.sh done in $(elapsed) s, exit $rc"
exit $rc
