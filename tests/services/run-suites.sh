#!/usr/bin/env bash
# The whole suite, as `make test` and CI run it, in the least wall time two cores allow.
#
# Four parts: the tests that need no Slurm (CPU-bound: simulations, classification, the
# databases, chromium), the real-Slurm tests on this machine's Slurm (tests/slurm), and the
# same Slurm tests on the other Slurm versions, each in a Debian chroot of its release
# (tests/services/other-slurm.sh suites: on Debian 12 trixie's 24.11 and sid's 26.05, on
# Debian 13 bookworm's 22.05 and sid's). The three Slurm suites spend most of their time
# waiting on slurmctld, slurmd and placer cycles (load about 0.5 each on two cores), and each
# has its own cluster (own state directory, ports, munge and /run) and its own SQLite
# databases, so they run side by side; the CPU-bound part runs alone first so that it never
# slows their timed waits.
#
# Usage: tests/services/run-suites.sh [PYTEST ARGS...]   (from the repository root, with the
#        database servers' and the host cluster's environment already set, as `make test` does)
#
# Environment: PAL_TEST_OTHER_SLURM=1 also runs the other Slurm versions (0: skip them, and say so);
#              PAL_TEST_OTHER_SUITES: the releases to run them on (default: every one the host
#              tests, `tests/services/other-slurm.sh suites`), e.g. "sid";
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
OTHER_SLURM=tests/services/other-slurm.sh

SUITES=()
if [ "$OTHER" = 1 ]; then
    if [ -n "${PAL_TEST_OTHER_SUITES:-}" ]; then
        read -r -a SUITES <<<"$PAL_TEST_OTHER_SUITES"
    else
        mapfile -t SUITES < <("$OTHER_SLURM" suites)
        [ "${#SUITES[@]}" -gt 0 ] || SUITES=(unknown)   # a host with no other release: its part fails
    fi
fi

status_fast=0 status_slurm=0
declare -A status_other=() other_pid=() other_log=()
for suite in "${SUITES[@]}"; do
    status_other[$suite]=install
    other_log[$suite]="$(mktemp "/tmp/pal-other-slurm-$suite.XXXXXX.log")"
done

# Ctrl-C (or SIGTERM: bash acts on it once the host's pytest, in the foreground, has returned):
# each chroot's run (its own session, so its whole group) is stopped and its cluster and mounts
# undone, never left behind; checked by hand, not in the suite
stop_others() {
    local suite pid
    for suite in "${!other_pid[@]}"; do
        pid="${other_pid[$suite]}"
        kill -0 "$pid" 2>/dev/null || continue
        kill -TERM -- "-$pid" 2>/dev/null || kill -TERM "$pid" 2>/dev/null
        wait "$pid" 2>/dev/null
        "$OTHER_SLURM" --suite "$suite" stop >/dev/null 2>&1
        echo "run-suites: interrupted: stopped the $suite chroot's run (log kept: ${other_log[$suite]})" >&2
    done
}
trap 'stop_others; exit 130' INT TERM

# every part in a random order (a test that passes only after another fails here); the seed is
# printed so that the order can be repeated
SEED="${PAL_TEST_SEED:-$(( (RANDOM << 15) | RANDOM ))}"
echo "run-suites: random test order, seed $SEED (PAL_TEST_SEED=$SEED make test repeats it)"
set -- --randomly-seed="$SEED" "$@"

"${PYTEST[@]}" -m "not slurm" "$@" || status_fast=$?

# installed one after the other (apt and pip are no faster side by side), then all started at once
for suite in "${SUITES[@]}"; do
    if "$OTHER_SLURM" --suite "$suite" install; then
        setsid "$OTHER_SLURM" --suite "$suite" test "$@" >"${other_log[$suite]}" 2>&1 &
        other_pid[$suite]=$!
    fi   # else its status stays "install": the host's Slurm tests still run; the verdict below fails
done

"${PYTEST[@]}" -m slurm "$@" || status_slurm=$?

for suite in "${SUITES[@]}"; do
    if [ -n "${other_pid[$suite]:-}" ]; then
        wait "${other_pid[$suite]}"
        status_other[$suite]=$?
        unset "other_pid[$suite]"
        echo
        echo "=== the Slurm tests in the $suite chroot (tests/services/other-slurm.sh --suite $suite test; ran alongside) ==="
        cat "${other_log[$suite]}"
    fi
    rm -f "${other_log[$suite]}"
done

# pytest's 5 is "no test selected": with PYTEST_ARGS picking tests of one part only, not a
# failure, unless no part ran a test at all; without them, a part that selects nothing fails
said() {
    case "$1" in
        0) echo passed ;;
        5) echo "no test selected" ;;
        install) echo "FAILED (its chroot did not install; see above)" ;;
        *) echo "FAILED ($1)" ;;
    esac
}
# "Slurm 26.05.5 (sid chroot)": the version the chroot's run printed, else the release alone
other_name() {
    local v
    v="$("$OTHER_SLURM" --suite "$1" status 2>/dev/null | sed -n 's/^slurm: Slurm \([0-9][0-9.]*\).*/\1/p')"
    echo "Slurm ${v:-?} ($1 chroot)"
}
echo
echo "run-suites: without Slurm: $(said "$status_fast")"
echo "run-suites: Slurm $(sinfo --version 2>/dev/null | awk '{print $2}') (this machine): $(said "$status_slurm")"
if [ "${#SUITES[@]}" -eq 0 ]; then
    echo "run-suites: the other Slurm versions: NOT TESTED (PAL_TEST_OTHER_SLURM=$OTHER)"
fi
for suite in "${SUITES[@]}"; do
    echo "run-suites: $(other_name "$suite"): $(said "${status_other[$suite]}")"
done
ran=0
for st in "$status_fast" "$status_slurm" "${status_other[@]}"; do
    case "$st" in
        0) ran=1 ;;
        5) [ "$#" -gt 0 ] || exit 1 ;;   # the whole suite selects tests in every part
        *) exit 1 ;;
    esac
done
[ "$ran" = 1 ] || { echo "run-suites: no test selected in any part"; exit 1; }
