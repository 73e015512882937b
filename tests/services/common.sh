# Helpers shared by the test-service scripts (db-servers.sh, slurm-cluster.sh, other-slurm.sh).
# Sourced, not run: the sourcing script sets PROG (the name its messages start with) first.
# shellcheck shell=bash

log() { printf '%s: %s\n' "$PROG" "$*" >&2; }
die() { printf '%s: error: %s\n' "$PROG" "$*" >&2; exit 1; }

have() { command -v "$1" >/dev/null 2>&1; }

# First existing command among the arguments (PATH, then the sbin/bin directories a non-root
# PATH often lacks).
find_cmd() {
    local c d
    for c in "$@"; do
        if have "$c"; then command -v "$c"; return 0; fi
        for d in /usr/sbin /usr/bin /usr/local/sbin /usr/local/bin; do
            if [ -x "$d/$c" ]; then printf '%s\n' "$d/$c"; return 0; fi
        done
    done
    return 1
}

# apt-get install the packages (Debian 12 and 13), as root or with passwordless sudo: the
# package lists are refreshed first only when they do not know a package, and once more
# before a retry when the install fails (stale lists on a fresh machine).
apt_install() {
    local sudo=() p need_update=0
    if [ "$(id -u)" -ne 0 ]; then
        if have sudo && sudo -n true 2>/dev/null; then
            sudo=(sudo -n)
        else
            die "install needs root (or passwordless sudo) to apt-get install: $*"
        fi
    fi
    have apt-get || die "apt-get not found; install by hand: $*"
    local apt=("${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get)
    for p in "$@"; do
        apt-cache show "$p" >/dev/null 2>&1 || need_update=1
    done
    if [ "$need_update" -eq 1 ]; then
        log "install: apt-get update"
        "${apt[@]}" update -q >&2 || die "apt-get update failed"
    fi
    log "install: apt-get install $*"
    if ! "${apt[@]}" install -y -q --no-install-recommends "$@" >&2; then
        log "install: apt-get install failed, retrying after apt-get update"
        "${apt[@]}" update -q >&2 || die "apt-get update failed"
        "${apt[@]}" install -y -q --no-install-recommends "$@" >&2 || die "apt-get install $* failed"
    fi
}

# Is something accepting TCP connections on 127.0.0.1:$1?
port_open() {
    # shellcheck disable=SC2016  # $1 is expanded by the inner bash
    timeout 3 bash -c 'exec 3<>"/dev/tcp/127.0.0.1/$1"' _ "$1" >/dev/null 2>&1
}

# Is process $1 alive?  A zombie (dead, not yet reaped: common in containers whose PID 1
# reaps slowly or not at all) counts as dead.
pid_alive() {
    local pid="${1:-}" state
    [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null || return 1
    if [ -r "/proc/$pid/stat" ]; then
        state="$(sed 's/.*) //' "/proc/$pid/stat" 2>/dev/null | cut -d' ' -f1)" || return 0
        [ "$state" != "Z" ] || return 1
    fi
    return 0
}

# Wait up to $3 seconds for process $2 (called $1 in messages), already asked to stop, to
# exit; then SIGKILL it, and fail if even that does not end it.
wait_or_kill() {
    local name="$1" pid="$2" limit_s="$3" halves=0
    while pid_alive "$pid"; do
        if [ "$halves" -ge $((limit_s * 2)) ]; then
            log "$name still running after ${limit_s}s, sending SIGKILL"
            kill -KILL "$pid" 2>/dev/null || true
            sleep 0.5
            pid_alive "$pid" && die "could not stop $name (pid $pid)"
            return 0
        fi
        sleep 0.5
        halves=$((halves + 1))
    done
}

# The last $2 (default 20) lines of log file $1, indented, on stderr; nothing if it is empty.
tail_log() {
    if [ -s "$1" ]; then
        log "last lines of $1:"
        tail -n "${2:-20}" "$1" | sed 's/^/    /' >&2 || true
    fi
}
