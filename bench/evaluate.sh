#!/usr/bin/env bash
# The real-Slurm evaluation (docs/evaluation.md, "The evaluation"): per fleet, plain Slurm and
# pal-slurm side by side on two replay clusters, 3 input-shaken repetitions each, then the
# summary of both arms (mean [min-max], prediction beside it, pal / slurm).
#
# Each fleet x repetition x arm writes its result when it finishes and a rerun skips what is
# done, so the evaluation can be completed over several sittings: run it again after an
# interruption. About 2.5 hours on a 2-core machine (k = 30 s per trace hour, workload-1 with
# run times capped at 8 trace hours: one arm about 15 minutes; 3 fleets x 3 repetitions).
#
# Usage: bench/evaluate.sh [OUT_DIR] [FLEET ...]     (as root; default evaluation-out, all fleets)
# Environment: PAL_EVAL_K (30), PAL_EVAL_CAP_HOURS (8), PAL_EVAL_REPS (3),
#              PAL_EVAL_TRACE (the artifact's workload-1), PAL_PYTHON (.venv/bin/python).
set -euo pipefail

here=$(cd "$(dirname "$0")/.." && pwd)
out=${1:-evaluation-out}
shift || true
fleets=("$@")
[ ${#fleets[@]} -gt 0 ] || fleets=(wide quiet artifact)
py=${PAL_PYTHON:-$here/.venv/bin/python}
artifact=${PAL_ARTIFACT_DIR:-$here/../shared/data/pal-artifact}
trace=${PAL_EVAL_TRACE:-$artifact/traces/sia-philly/workload-1.csv}
common=(--trace "$trace" --seconds-per-hour "${PAL_EVAL_K:-30}" --cap-hours "${PAL_EVAL_CAP_HOURS:-8}"
        --reps "${PAL_EVAL_REPS:-3}")

for fleet in "${fleets[@]}"; do
    dir=$out/$fleet
    mkdir -p "$dir"
    echo "== fleet $fleet: both arms side by side (logs $dir/slurm.log, $dir/pal.log)"
    # the clusters are this script's own: start each fleet on empty ones (an interrupted
    # sitting may have left jobs in their saved state, and a replay needs its cluster to itself)
    for c in "a 16957 17401" "b 16977 17501"; do
        set -- $c
        PAL_TEST_SLURM_DIR=/var/tmp/pal-eval-slurm-$1 PAL_TEST_SLURM_CTLD_PORT=$2 PAL_TEST_SLURM_NODE_PORT=$3 \
            "$here/tests/services/slurm-cluster.sh" stop >/dev/null 2>&1 || true
        rm -rf "/var/tmp/pal-eval-slurm-$1"
    done
    "$py" "$here/bench/replay.py" "${common[@]}" --fleet "$fleet" --out "$dir" --arms slurm \
        --cluster-dir /var/tmp/pal-eval-slurm-a --ctld-port 16957 --node-port 17401 >"$dir/slurm.log" 2>&1 &
    a=$!
    "$py" "$here/bench/replay.py" "${common[@]}" --fleet "$fleet" --out "$dir" --arms pal \
        --cluster-dir /var/tmp/pal-eval-slurm-b --ctld-port 16977 --node-port 17501 >"$dir/pal.log" 2>&1 &
    b=$!
    rc=0
    wait $a || rc=$?
    wait $b || rc=$?
    if [ $rc -ne 0 ]; then
        echo "fleet $fleet: an arm did not complete (see the logs); rerun to finish it" >&2
        tail -n 5 "$dir/slurm.log" "$dir/pal.log" >&2
        exit $rc
    fi
    # every repetition is done now: this pass only reads the results and prints the summary
    "$py" "$here/bench/replay.py" "${common[@]}" --fleet "$fleet" --out "$dir" --arms slurm,pal \
        --cluster-dir /var/tmp/pal-eval-slurm-a --ctld-port 16957 --node-port 17401 | tee "$dir/summary.txt"
done
