#!/usr/bin/env bash
# The experiments behind "One GPU out of service" (docs/admin-guide.md): which Slurm mechanism
# hides one GPU slot from every new job without draining its node, run against a test cluster.
#
# Usage (the host's cluster, or a chroot's through other-slurm.sh run):
#   eval "$(tests/services/slurm-cluster.sh env)"; tests/services/quarantine-experiments.sh
#   PAL_OTHER_SLURM_SUITE=trixie tests/services/other-slurm.sh run tests/services/quarantine-experiments.sh
#
# It prints every command it runs ("$ ...") with Slurm's answer and exit status, and a line
# "RESULT: ..." per finding. It uses the cluster's last node and that node's last GPU slot,
# restarts slurmctld and that node's slurmd (slurm-cluster.sh restart-ctld / restart-slurmd),
# and cancels every job it submitted and deletes its reservation at the end. Needs root and an
# otherwise idle cluster (the jobs of other sessions would change what runs where).
#
# What it tries:
#   a  scontrol update NodeName=N Gres=...   the slot's type left out, or with count 0
#   b  scontrol create reservation ... TRES=gres/gpu:TYPE=1   (GRES reservations: 23.11 and later;
#      their TRES must be in AccountingStorageTRES, which needs slurmdbd)
#   c  a holder job pinned to the slot (its type, the node, one CPU, 1 MB, the top priority, then no
#      time limit by scontrol update): what new jobs of each request form get while it runs, a job
#      already running on the slot, scontrol reconfigure, a slurmctld restart, a slurmd restart,
#      its node set DOWN and resumed, its release, and its time limit in a partition whose MaxTime
#      is one minute

set -uo pipefail

PROG="quarantine-experiments"
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=tests/services/common.sh
. "$HERE/common.sh"
CLUSTER="$HERE/slurm-cluster.sh"

[ -n "${SLURM_CONF:-}" ] || die "no SLURM_CONF: eval \"\$($CLUSTER env)\" first"
[ "$(id -u)" = 0 ] || die "needs root (the holder runs as root; slurmd is restarted)"

NODE="${PAL_EXP_NODE:-$(sinfo -h -N -o '%N' | sort -V | tail -n 1)}"
GRES="$(scontrol show node "$NODE" | sed -n 's/^ *Gres=\([^ ]*\).*/\1/p')"
SLOTS="$(printf '%s\n' "$GRES" | tr ',' '\n' | grep -c .)"
TYPE="$(printf '%s\n' "$GRES" | tr ',' '\n' | tail -n 1 | cut -d: -f2)"
MINOR="${TYPE##*_g}"
OTHERS="$(printf '%s\n' "$GRES" | tr ',' '\n' | grep -v ":$TYPE:" | paste -sd, -)"
PART="$(scontrol show partition -o | awk '{for (i = 1; i <= NF; i++) if ($i ~ /^PriorityTier=/) {split($i, t, "="); print t[2], $1}}' |
    sort -rn | head -n 1 | sed 's/.*PartitionName=//')"
JOBS=()
HOLDER=""

say() { printf '%s\n' "$*"; }
result() { printf 'RESULT: %s\n' "$*"; }
# run CMD...: print it, its output (indented) and its exit status; the output is left in $OUT
run() {
    say "\$ $*"
    OUT="$("$@" 2>&1)"
    RC=$?
    [ -z "$OUT" ] || printf '%s\n' "$OUT" | sed 's/^/    /'
    say "    (exit $RC)"
}
submit() {  # submit ARGS...: sbatch, the job id in $JOB (empty when refused)
    run sbatch --parsable -o /dev/null "$@"
    JOB=""
    if [ "$RC" = 0 ]; then JOB="${OUT%%;*}"; JOBS+=("$JOB"); fi
}
state() { scontrol show job -o "$1" 2>/dev/null | grep -o 'JobState=[A-Z_]*' | cut -d= -f2; }
reason() { scontrol show job -o "$1" 2>/dev/null | grep -o 'Reason=[^ ]*' | cut -d= -f2; }
# the GPU indices a running job holds on NODE ("3", "0-2", "0,2"), from scontrol -d
indices() {
    scontrol -d show job "$1" 2>/dev/null | grep -E "Nodes=$NODE( |$)" | grep -o 'IDX:[^)]*' | cut -d: -f2 | grep . |
        paste -sd, -
}
wait_state() {  # wait_state JOB STATE SECONDS: 0 when the job reached STATE in time
    local i
    for ((i = 0; i < $3 * 4; i++)); do
        [ "$(state "$1")" = "$2" ] && return 0
        sleep 0.25
    done
    return 1
}
gone() {  # cancel the jobs and wait until they have left the node
    [ "$#" -gt 0 ] || return 0
    scancel "$@" 2>/dev/null
    local i j busy
    for ((i = 0; i < 120; i++)); do
        busy=0
        for j in "$@"; do
            case "$(state "$j")" in PENDING | RUNNING | COMPLETING | CONFIGURING) busy=1 ;; esac
        done
        [ "$busy" = 0 ] && return 0
        sleep 0.25
    done
}
has_slot() {  # has_slot INDICES: whether the index list covers MINOR
    local part a b
    for part in ${1//,/ }; do
        a="${part%-*}" b="${part#*-}"
        [ "$MINOR" -ge "$a" ] && [ "$MINOR" -le "$b" ] && return 0
    done
    return 1
}
# probe_runs NAME ARGS...: a job that should run on NODE, on other slots than the quarantined one
probe_runs() {
    local name="$1"
    shift
    submit -J "exp-$name" -w "$NODE" --time=5 "$@" --wrap 'sleep 300'
    [ -n "$JOB" ] || { result "$name: refused at submission"; return; }
    if wait_state "$JOB" RUNNING 15; then
        local idx
        idx="$(indices "$JOB")"
        if has_slot "$idx"; then result "$name: RAN ON THE QUARANTINED SLOT (IDX $idx)"
        else result "$name: runs on $NODE, GPU indices $idx (not $MINOR)"; fi
    else
        result "$name: did not start within 15 s ($(state "$JOB") $(reason "$JOB"))"
    fi
    gone "$JOB"
}
# probe_gets NAME ARGS...: a job that should run on the slot (once it is released)
probe_gets() {
    local name="$1"
    shift
    submit -J "exp-$name" -w "$NODE" --time=5 "$@" --wrap 'sleep 300'
    [ -n "$JOB" ] || { result "$name: refused at submission"; return; }
    if wait_state "$JOB" RUNNING 15; then result "$name: runs on $NODE, GPU index $(indices "$JOB")"
    else result "$name: did not start within 15 s ($(state "$JOB") $(reason "$JOB"))"; fi
    gone "$JOB"
}
# probe_pends NAME ARGS...: a job that needs the quarantined slot: it must not start
probe_pends() {
    local name="$1"
    shift
    submit -J "exp-$name" -w "$NODE" --time=5 "$@" --wrap 'sleep 300'
    [ -n "$JOB" ] || { result "$name: refused at submission"; return; }
    sleep 8
    local st
    st="$(state "$JOB")"
    if [ "$st" = PENDING ]; then result "$name: pending after 8 s (reason $(reason "$JOB"))"
    else result "$name: $st (GPU indices $(indices "$JOB"))"; fi
    gone "$JOB"
}

# every request form, against what hides the slot now
request_forms() {
    say "## new jobs of every request form on $NODE while $TYPE is hidden"
    probe_pends "typed $TYPE" --gres="gpu:$TYPE:1"
    local ids=() i
    for ((i = 1; i < SLOTS; i++)); do
        submit -J "exp-untyped-$i" -w "$NODE" --time=5 --gres=gpu:1 --wrap 'sleep 300'
        ids+=("$JOB")
    done
    sleep 4
    for i in "${ids[@]}"; do
        result "untyped --gres=gpu:1 job $i: $(state "$i") GPU indices $(indices "$i")"
    done
    probe_pends "one more untyped --gres=gpu:1 beside them" --gres=gpu:1
    gone "${ids[@]}"
    probe_runs "--gres=gpu:$((SLOTS - 1))" --gres="gpu:$((SLOTS - 1))"
    probe_pends "--gres=gpu:$SLOTS (every GPU of the node)" --gres="gpu:$SLOTS"
    probe_runs "-N1 --gpus=$((SLOTS - 1))" -N1 --gpus="$((SLOTS - 1))"
    probe_pends "-N1 --gpus=$SLOTS" -N1 --gpus="$SLOTS"
    probe_runs "-N2 --gpus=$((2 * SLOTS - 1))" -N2 --gpus="$((2 * SLOTS - 1))"
    probe_pends "-N2 --gpus-per-node=$SLOTS" -N2 --gpus-per-node="$SLOTS"
    probe_runs "--gpus-per-node=$((SLOTS - 1))" --gpus-per-node="$((SLOTS - 1))"
    probe_pends "--gpus-per-node=$SLOTS" --gpus-per-node="$SLOTS"
    probe_pends "--exclusive --gres=gpu:1" --exclusive --gres=gpu:1
    probe_pends "--exclusive (no GPU asked)" --exclusive
}

# the whole cluster filled with one-GPU jobs: none gets the slot
fill_cluster() {
    local total ids=() i n=0 hit=0 running=0
    total="$(scontrol show node -o | grep -o 'Gres=[^ ]*' | tr ',' '\n' | grep -c 'gpu:')"
    say "## the whole cluster ($total GPU slots) filled with untyped one-GPU jobs"
    for ((i = 0; i < total; i++)); do
        JOB="$(sbatch --parsable -o /dev/null -J exp-fill --time=5 --gres=gpu:1 --wrap 'sleep 300' 2>/dev/null)"
        [ -n "$JOB" ] && ids+=("$JOB") && JOBS+=("$JOB")
    done
    say "\$ sbatch --gres=gpu:1 ... x $total"
    sleep 8
    for i in "${ids[@]}"; do
        [ "$(state "$i")" = RUNNING ] || continue
        running=$((running + 1))
        if scontrol -d show job "$i" | grep -E "Nodes=$NODE( |$)" >/dev/null && has_slot "$(indices "$i")"; then hit=1; fi
        n=$((n + 1))
    done
    if [ "$hit" = 1 ]; then result "fill: a one-GPU job RAN ON THE QUARANTINED SLOT"
    else result "fill: $running of $total one-GPU jobs running, none on $NODE index $MINOR"; fi
    gone "${ids[@]}"
}

holder() {  # holder PARTITION: submit the holder (as pal gpus quarantine does), its id in $JOB
    submit -J pal-quarantine-exp -p "$1" -w "$NODE" -N1 -n1 -c1 --mem=1 "--gres=gpu:$TYPE:1" --priority=TOP --requeue \
        --comment="pal: quarantine experiment" --wrap 'exec sleep infinity'
    [ -n "$JOB" ] || return 0
    run scontrol update "JobId=$JOB" "AdminComment=pal: quarantine experiment" TimeLimit=UNLIMITED
}

# a partition whose MaxTime is one minute: the holder's time limit, set by an administrator, outlives it
exp_max_time() {
    say "## the holder in a partition with MaxTime=1 (one minute)"
    run scontrol create PartitionName=pal-exp-short "Nodes=$NODE" MaxTime=1 State=UP
    holder pal-exp-short
    local short="$JOB"
    [ -n "$short" ] || { result "holder in pal-exp-short: not submitted"; return; }
    wait_state "$short" RUNNING 15
    run scontrol show job -o "$short"
    result "holder $short in pal-exp-short: $(state "$short") $(printf '%s\n' "$OUT" | grep -o 'TimeLimit=[^ ]*')"
    sleep 80
    result "holder $short 80 s later: $(state "$short") ($(reason "$short"))"
    gone "$short"
    run scontrol delete PartitionName=pal-exp-short
}

# the node fails (set DOWN: its jobs are killed and requeued) and comes back, a typed job
# submitted meanwhile; then the requeued holder's begin time is moved to now
exp_node_down() {
    say "## $NODE set DOWN (as on a node failure); a job for the slot submitted meanwhile"
    run scontrol update "NodeName=$NODE" State=DOWN Reason=pal-quarantine-experiment
    sleep 2
    run scontrol show job -o "$HOLDER"
    result "holder $HOLDER with $NODE set down: $(state "$HOLDER") ($(reason "$HOLDER"))" \
        "$(printf '%s\n' "$OUT" | grep -o -E 'Restarts=[0-9]+|EligibleTime=[^ ]+|Priority=[0-9]+' | paste -sd' ' -)" \
        "(now $(date +%H:%M:%S))"
    run scontrol show node "$NODE"
    result "$NODE: $(printf '%s\n' "$OUT" | grep -o -E ' State=[^ ]+' | tr -d ' ')"
    if printf '%s\n' "$OUT" | grep -E ' State=DOWN' >/dev/null; then run scontrol update "NodeName=$NODE" State=RESUME; fi
    submit -J exp-waiting-for-slot -w "$NODE" --time=5 "--gres=gpu:$TYPE:1" --wrap 'sleep 300'
    local waiting="$JOB"
    wait_state "$waiting" RUNNING 15
    result "typed job $waiting submitted while the holder waits out its begin time: $(state "$waiting")" \
        "($(reason "$waiting")) index $(indices "$waiting")"
    gone "$waiting"
    run scontrol update "JobId=$HOLDER" StartTime=now
    wait_state "$HOLDER" RUNNING 15
    result "holder $HOLDER after StartTime=now: $(state "$HOLDER") index $(indices "$HOLDER")"
}

holder_check() {  # holder_check WHEN: the holder still runs on the slot, and a typed job still pends
    local st idx
    st="$(state "$HOLDER")"
    idx="$(indices "$HOLDER")"
    result "$1: holder $HOLDER $st on $NODE index $idx"
    probe_pends "$1: typed $TYPE" --gres="gpu:$TYPE:1"
}

exp_gres_update() {
    say "# a: scontrol update NodeName=$NODE Gres=... with one slot fewer"
    run scontrol update "NodeName=$NODE" "Gres=$OTHERS"
    result "a: Gres without $TYPE: exit $RC${OUT:+ ($OUT)}"
    run scontrol update "NodeName=$NODE" "Gres=$OTHERS,gpu:$TYPE:0"
    result "a: Gres with $TYPE:0: exit $RC${OUT:+ ($OUT)}"
    run scontrol show node "$NODE"
    result "a: the node's Gres now: $(printf '%s\n' "$OUT" | sed -n 's/^ *Gres=\([^ ]*\).*/\1/p')"
    grep -h "Count on node $NODE\|gres set to" "$PAL_TEST_SLURM_DIR/log/slurmctld.log" 2>/dev/null | tail -n 2 | sed 's/^/    log: /'
}

# quick_probe NAME: the slot's type pends, and one-GPU jobs take the node's other slots; sets QUICK_OK
quick_probe() {
    local ids=() i ok=1
    probe_pends "$1: typed $TYPE" --gres="gpu:$TYPE:1"
    for ((i = 1; i < SLOTS; i++)); do
        submit -J "exp-quick-$i" -w "$NODE" --time=5 --gres=gpu:1 --wrap 'sleep 300'
        ids+=("$JOB")
    done
    sleep 5
    for i in "${ids[@]}"; do
        result "$1: untyped --gres=gpu:1 job $i: $(state "$i") ($(reason "$i")) GPU indices $(indices "$i")"
        [ "$(state "$i")" = RUNNING ] && ! has_slot "$(indices "$i")" || ok=0
    done
    gone "${ids[@]}"
    QUICK_OK=$ok
}

exp_reservation() {
    say "# b: a reservation of the slot's GRES"
    run scontrol show config
    say "    AccountingStorageType: $(printf '%s\n' "$OUT" | sed -n 's/^AccountingStorageType *= *//p');" \
        "AccountingStorageTRES: $(printf '%s\n' "$OUT" | sed -n 's/^AccountingStorageTRES *= *//p')"
    # the control: a reservation of one core of the node (no GRES, no slurmdbd needed)
    run scontrol create reservation ReservationName=pal-exp-q "Nodes=$NODE" StartTime=now Duration=UNLIMITED \
        Users=root CoreCnt=1
    run scontrol show reservation pal-exp-q
    result "b: control, CoreCnt=1 alone: reserved $(printf '%s\n' "$OUT" | grep -o -E 'CoreCnt=[0-9]+|TRES=[^ ]+' |
        paste -sd' ' -)"
    run scontrol delete ReservationName=pal-exp-q
    local good="" spec
    for spec in "CoreCnt=1 TRES=gres/gpu:$TYPE=1" "TRES=cpu=1,gres/gpu:$TYPE=1" "TRES=gres/gpu:$TYPE=1" "TRES=gres/gpu=1"; do
        # shellcheck disable=SC2086  # one word per field
        run scontrol create reservation ReservationName=pal-exp-q "Nodes=$NODE" StartTime=now Duration=UNLIMITED \
            Users=root $spec
        result "b: $spec: exit $RC${OUT:+ ($OUT)}"
        [ "$RC" = 0 ] || continue
        run scontrol show reservation pal-exp-q
        result "b: $spec: reserved $(printf '%s\n' "$OUT" | grep -o -E 'CoreCnt=[0-9]+|TRES=[^ ]+' | paste -sd' ' -)"
        quick_probe "b: $spec"
        run scontrol delete ReservationName=pal-exp-q
        if [ "$QUICK_OK" = 1 ] && [ -z "$good" ]; then good="$spec"; fi
    done
    if [ -z "$good" ]; then
        result "b: no reservation hid only the slot"
        return 0
    fi
    say "## the whole check with $good"
    # shellcheck disable=SC2086
    run scontrol create reservation ReservationName=pal-exp-q "Nodes=$NODE" StartTime=now Duration=UNLIMITED \
        Users=root $good
    request_forms
    fill_cluster
    run scontrol reconfigure
    sleep 3
    probe_pends "b: after scontrol reconfigure: typed $TYPE" --gres="gpu:$TYPE:1"
    run "$CLUSTER" restart-ctld
    probe_pends "b: after a slurmctld restart: typed $TYPE" --gres="gpu:$TYPE:1"
    run scontrol delete ReservationName=pal-exp-q
}

exp_holder() {
    say "# c: a holder job pinned to $NODE's $TYPE"
    say "## a job already running on the slot, the holder submitted behind it"
    submit -J exp-running -w "$NODE" --time=2 --gres="gpu:$TYPE:1" --wrap 'sleep 20; echo done'
    local running="$JOB"
    wait_state "$running" RUNNING 15
    result "running job $running: $(state "$running") on index $(indices "$running")"
    holder "$PART"
    HOLDER="$JOB"
    sleep 3
    result "holder $HOLDER while the slot is busy: $(state "$HOLDER") ($(reason "$HOLDER"))"
    local ids=() i
    for ((i = 1; i < SLOTS; i++)); do
        submit -J "exp-busy-$i" -w "$NODE" --time=5 --gres=gpu:1 --wrap 'sleep 300'
        ids+=("$JOB")
    done
    submit -J exp-competitor -w "$NODE" --time=5 --gres=gpu:1 --wrap 'sleep 300'
    local competitor="$JOB"
    sleep 3
    result "competitor $competitor (untyped, submitted before the slot frees): $(state "$competitor") ($(reason "$competitor"))"
    wait_state "$HOLDER" RUNNING 40
    run scontrol show job -o "$running"
    result "running job $running afterwards: $(state "$running")$(printf '%s\n' "$OUT" | grep -o ' ExitCode=[^ ]*')"
    result "holder $HOLDER once the slot is free: $(state "$HOLDER") on index $(indices "$HOLDER")"
    result "competitor $competitor: $(state "$competitor") ($(reason "$competitor")) indices $(indices "$competitor")"
    gone "${ids[@]}" "$competitor"
    run scontrol show node "$NODE"
    result "the holder's cost on $NODE: $(printf '%s\n' "$OUT" | grep -o -E 'CPUAlloc=[0-9]+|AllocMem=[0-9]+' | paste -sd' ' -)"
    request_forms
    fill_cluster
    say "## persistence"
    run scontrol reconfigure
    sleep 3
    holder_check "after scontrol reconfigure"
    run "$CLUSTER" restart-ctld
    holder_check "after a slurmctld restart"
    run "$CLUSTER" restart-slurmd "$NODE"
    holder_check "after a restart of $NODE's slurmd"
    exp_node_down
    say "## release"
    run scancel "$HOLDER"
    gone "$HOLDER"
    probe_gets "after release: typed $TYPE" --gres="gpu:$TYPE:1"
    exp_max_time
}

cleanup() {
    scontrol delete ReservationName=pal-exp-q >/dev/null 2>&1
    if scontrol show node "$NODE" | grep -q 'Reason=pal-quarantine-experiment'; then
        scontrol update "NodeName=$NODE" State=RESUME >/dev/null 2>&1
    fi
    scontrol delete PartitionName=pal-exp-short >/dev/null 2>&1
    [ "${#JOBS[@]}" -eq 0 ] || scancel "${JOBS[@]}" 2>/dev/null
}
trap cleanup EXIT

say "# Slurm $(sinfo --version | awk '{print $2}'), node $NODE (Gres=$GRES), slot $TYPE (minor $MINOR), holder partition $PART"
case "${1:-all}" in
    a) exp_gres_update ;;
    b) exp_reservation ;;
    c) exp_holder ;;
    down) holder "$PART"; HOLDER="$JOB"; wait_state "$HOLDER" RUNNING 15; exp_node_down; run scancel "$HOLDER" ;;
    all) exp_gres_update; exp_reservation; exp_holder ;;
    *) die "usage: $0 [a|b|c|down|all]" ;;
esac
