#!/usr/bin/env bash
# The real-Slurm evaluation (docs/evaluation.md, "The evaluation"): per fleet, plain Slurm and
# pal-slurm side by side on two replay clusters, 3 input-shaken repetitions each; for the fleets
# in PAL_EVAL_HISTORY also pal-slurm with runtimes learned from the sacct exports of those runs
# (arm pal+history, on a third cluster while the next fleet's arms run); then the summary of
# every fleet (mean [min-max], prediction beside it, the ratios).
#
# Each fleet x repetition x arm writes its result when it finishes and a rerun skips what is
# done, so the evaluation can be completed over several sittings: run it again after an
# interruption. About 2.5 hours on a 2-core machine (k = 30 s per trace hour, workload-1 with
# run times capped at 8 trace hours: one arm about 16 minutes; 3 fleets x 3 repetitions).
#
# Usage: bench/evaluate.sh [OUT_DIR] [FLEET ...]     (as root; default evaluation-out, all fleets)
# Environment: PAL_EVAL_K (30), PAL_EVAL_CAP_HOURS (8), PAL_EVAL_REPS (3), PAL_EVAL_HISTORY
#              (fleets with a pal+history arm; default wide), PAL_EVAL_TRACE (the artifact's
#              workload-1), PAL_PYTHON (.venv/bin/python);
#              today's shape: PAL_EVAL_SHAPE (NODESxGPUS, default 16x4), PAL_EVAL_LLM (a seed: the
#              LLM-era mix drawn for that shape instead of the trace, run times not capped),
#              PAL_EVAL_LLM_JOBS (300), PAL_EVAL_LAMBDA (the replay's default, 1.7; the matrix
#              at 8-GPU nodes uses 1.0), PAL_EVAL_BF_RESOLUTION (the replay clusters'
#              bf_resolution, real seconds; default Slurm's 60 s compressed:
#              1 at k = 30). E.g. PAL_EVAL_SHAPE=8x8
#              PAL_EVAL_LLM=2 PAL_EVAL_LAMBDA=1.0 PAL_EVAL_HISTORY= bench/evaluate.sh eval-8x8 wide quiet
set -euo pipefail

here=$(cd "$(dirname "$0")/.." && pwd)
out=${1:-evaluation-out}
shift || true
fleets=("$@")
[ ${#fleets[@]} -gt 0 ] || fleets=(wide quiet artifact)
history=" ${PAL_EVAL_HISTORY-wide} "
py=${PAL_PYTHON:-$here/.venv/bin/python}
artifact=${PAL_ARTIFACT_DIR:-$here/../tests/data/pal-artifact}
trace=${PAL_EVAL_TRACE:-$artifact/traces/sia-philly/workload-1.csv}
shape=${PAL_EVAL_SHAPE:-16x4}
if ! [[ "$shape" =~ ^[1-9][0-9]*x[1-9][0-9]*$ ]]; then
    echo "evaluate.sh: PAL_EVAL_SHAPE must be NODESxGPUS, e.g. 8x8, not '$shape'" >&2
    exit 2
fi
if [ -n "${PAL_EVAL_LLM:-}" ]; then
    common=(--llm "$PAL_EVAL_LLM" --llm-jobs "${PAL_EVAL_LLM_JOBS:-300}")
else
    common=(--trace "$trace" --cap-hours "${PAL_EVAL_CAP_HOURS:-8}")
fi
common+=(--nodes "${shape%x*}" --gpus-per-node "${shape#*x}" --seconds-per-hour "${PAL_EVAL_K:-30}"
         --reps "${PAL_EVAL_REPS:-3}")
[ -z "${PAL_EVAL_LAMBDA:-}" ] || common+=(--lambda "$PAL_EVAL_LAMBDA")
[ -z "${PAL_EVAL_BF_RESOLUTION:-}" ] || common+=(--bf-resolution "$PAL_EVAL_BF_RESOLUTION")
# the clusters: name, slurmctld port, first slurmd port
declare -A ctld=([a]=16957 [b]=16977 [c]=16997) node=([a]=17401 [b]=17501 [c]=17601)

fresh() {  # a cluster of this script's own, emptied: an interrupted sitting may have left jobs in its saved state
    PAL_TEST_SLURM_DIR=/var/tmp/pal-eval-slurm-$1 PAL_TEST_SLURM_CTLD_PORT=${ctld[$1]} \
        PAL_TEST_SLURM_NODE_PORT=${node[$1]} "$here/tests/services/slurm-cluster.sh" stop >/dev/null 2>&1 || true
    rm -rf "/var/tmp/pal-eval-slurm-$1"
}

arm() {  # arm FLEET ARMS CLUSTER: one replay.py in the background, its log beside the results
    local dir=$out/$1
    mkdir -p "$dir"
    fresh "$3"
    "$py" "$here/bench/replay.py" "${common[@]}" --fleet "$1" --out "$dir" --arms "$2" \
        --cluster-dir "/var/tmp/pal-eval-slurm-$3" --ctld-port "${ctld[$3]}" --node-port "${node[$3]}" \
        >"$dir/$2.log" 2>&1 &
    pids+=($!)
    echo "   $1: arm $2 on cluster $3 (log $dir/$2.log)"
}

rc=0
pending_history=""
for fleet in "${fleets[@]}" ""; do
    pids=()
    echo "== stage: fleet ${fleet:-none} side by side${pending_history:+, pal+history of $pending_history}"
    if [ -n "$fleet" ]; then
        arm "$fleet" slurm a
        arm "$fleet" pal b
    fi
    if [ -n "$pending_history" ]; then
        arm "$pending_history" pal+history c
    fi
    for p in "${pids[@]}"; do
        wait "$p" || rc=1
    done
    pending_history=""
    if [ -n "$fleet" ] && [[ "$history" == *" $fleet "* ]]; then
        pending_history=$fleet
    fi
done
[ $rc -eq 0 ] || echo "an arm did not complete (see the logs above); rerun to finish it" >&2

for fleet in "${fleets[@]}"; do  # every repetition done: this pass reads the results and predicts them again (today's simulator)
    arms=slurm,pal
    [[ "$history" == *" $fleet "* ]] && arms=slurm,pal,pal+history
    fresh a
    "$py" "$here/bench/replay.py" "${common[@]}" --fleet "$fleet" --out "$out/$fleet" --arms "$arms" --repredict \
        --cluster-dir /var/tmp/pal-eval-slurm-a --ctld-port "${ctld[a]}" --node-port "${node[a]}" \
        | tee "$out/$fleet/summary.txt"
done
exit $rc
