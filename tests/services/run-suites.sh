#!/usr/bin/env bash
# The whole suite, as `make test` and CI run it, in the least wall time two cores allow.
#
# Three parts: the tests that need no Slurm (CPU-bound: simulations, classification, the
# databases, chromium), the real-Slurm tests on this machine's Slurm (tests/slurm), and the
# same Slurm tests on the other supported Slurm version in a Debian chroot
# (tests/services/other-slurm.sh). The two Slurm suites spend most of their time waiting on
# slurmctld, slurmd and placer cycles (load about 0.5 on two cores), and each has its own
# cluster (own state directory, ports, munge and /run) and its own SQLite databases, so they
# run side by side; the CPU-bound part runs alone first so that it never slows their timed waits.
#
# Usage: tests/services/run-suites.sh [PYTEST ARGS...]   (from the repository root, with the
#        database servers' and the host cluster's environment already set, as `make test` does)
#
# Environment: PAL_TEST_OTHER_SLURM=1 also runs the other Slurm version (0: skip it, and say so);
#              PAL_PYTEST (default .venv/bin/python -m pytest);
#              PAL_TEST_SEED: the seed of the random test order (pytest-randomly; default: a new
#              one, printed first, so that a failing order can be run again with it).
# Exit status: 0 only when every part passed (or, with PYTEST ARGS, selected no test while
# another part passed); each part's result is printed at the end.

set -uo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$REPO" || exit 2
read -r -a PYTEST <<<"${PAL_PYTEST:-.venv/bin/python -m pytest}"
OTHER="${PAL_TEST_OTHER_SLURM:-1}"
OTHER_LOG="$(mktemp /tmp/pal-other-slurm.XXXXXX.log)"

status_fast=0 status_slurm=0 status_other=skipped other_pid=""

# Ctrl-C (or SIGTERM: bash acts on it once the host's pytest, in the foreground, has returned):
# the chroot's run (its own session, so its whole group) is stopped and its cluster and mounts
# undone, never left behind; checked by hand, not in the suite
stop_other() {
    if [ -n "$other_pid" ] && kill -0 "$other_pid" 2>/dev/null; then
        kill -TERM -- "-$other_pid" 2>/dev/null || kill -TERM "$other_pid" 2>/dev/null
        wait "$other_pid" 2>/dev/null
        tests/services/other-slurm.sh stop >/dev/null 2>&1
        echo "run-suites: interrupted: stopped the other Slurm version's run (log kept: $OTHER_LOG)" >&2
    fi
}
trap 'stop_other; exit 130' INT TERM

# every part in a random order (a test that passes only after another fails here); the seed is
# printed so that the order can be repeated
SEED="${PAL_TEST_SEED:-$(( (RANDOM << 15) | RANDOM ))}"
echo "run-suites: random test order, seed $SEED (PAL_TEST_SEED=$SEED make test repeats it)"
set -- --randomly-seed="$SEED" "$@"

"${PYTEST[@]}" -m "not slurm" "$@" || status_fast=$?

if [ "$OTHER" = 1 ]; then
    if tests/services/other-slurm.sh install; then
        setsid tests/services/other-slurm.sh test "$@" >"$OTHER_LOG" 2>&1 &
        other_pid=$!
    else
        status_other=install   # the host's Slurm tests still run; the verdict below fails
    fi
fi

"${PYTEST[@]}" -m slurm "$@" || status_slurm=$?

if [ -n "$other_pid" ]; then
    wait "$other_pid"
    status_other=$?
    other_pid=""
    echo
    echo "=== the Slurm tests on the other Slurm version (tests/services/other-slurm.sh test; ran alongside) ==="
    cat "$OTHER_LOG"
fi
rm -f "$OTHER_LOG"

# pytest's 5 is "no test selected": with PYTEST_ARGS picking tests of one part only, not a
# failure, unless no part ran a test at all; without them, a part that selects nothing fails
said() {
    case "$1" in
        0) echo passed ;;
        5) echo "no test selected" ;;
        skipped) echo "NOT TESTED (PAL_TEST_OTHER_SLURM=$OTHER)" ;;
        install) echo "FAILED (its chroot did not install; see above)" ;;
        *) echo "FAILED ($1)" ;;
    esac
}
echo
echo "run-suites: without Slurm: $(said "$status_fast")"
echo "run-suites: Slurm $(sinfo --version 2>/dev/null | awk '{print $2}'): $(said "$status_slurm")"
echo "run-suites: the other Slurm version: $(said "$status_other")"
ran=0
for st in "$status_fast" "$status_slurm" "$status_other"; do
    case "$st" in
        0) ran=1 ;;
        skipped) ;;
        5) [ "$#" -gt 0 ] || exit 1 ;;   # the whole suite selects tests in every part
        *) exit 1 ;;
    esac
done
[ "$ran" = 1 ] || { echo "run-suites: no test selected in any part"; exit 1; }
