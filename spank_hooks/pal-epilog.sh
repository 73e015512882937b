#!/bin/sh
# pal-epilog.sh - Slurm Epilog for pal-slurm's node agent (pal agent).
#
# Runs as root in slurmd on every node of a job after it ended there. It marks the job's
# mapping file (written by pal-prolog.sh) as ended by appending end=<unix seconds>,
# atomically (copy + rename); the agent then writes the job's GPU profile and removes
# the file. Files the agent never collected (agent not running) are removed a day
# after they were last touched, so the directory cannot grow without bound.
#
# No Slurm command; ALWAYS exits 0 (a failing Epilog drains the node).
# Same directory rules as pal-prolog.sh: $PAL_JOBMAP_DIR, default /run/pal/jobs, "%n" = node.

# slurmd gives Prolog/Epilog no PATH at all (seen on 22.05): use the system's, never the caller's.
PATH=/usr/sbin:/usr/bin:/sbin:/bin
export PATH

main() {
    job="${SLURM_JOB_ID:-}"
    case "$job" in
        '' | *[!0-9]*) return 0 ;;
    esac
    dir="${PAL_JOBMAP_DIR:-/run/pal/jobs}"
    node="${SLURMD_NODENAME:-$(hostname 2>/dev/null)}"
    case "$dir" in
        *%n*) dir="$(printf '%s' "$dir" | sed "s/%n/$(printf '%s' "$node" | tr -cd 'A-Za-z0-9._-')/g")" ;;
    esac
    [ -d "$dir" ] || return 0
    find "$dir" -type f -name '*.job' -mtime +1 -exec rm -f {} + 2>/dev/null
    file="$dir/$job.job"
    [ -f "$file" ] || return 0
    grep -q '^end=' "$file" 2>/dev/null && return 0
    end="$(date +%s 2>/dev/null)"
    case "$end" in
        '' | *[!0-9]*) end="" ;;
    esac
    tmp="$dir/.$job.$$.tmp"
    umask 077  # as the prolog: the map stays root's
    { cat "$file" && printf 'end=%s\n' "$end"; } >"$tmp" 2>/dev/null && mv -f "$tmp" "$file" 2>/dev/null
    rm -f "$tmp" 2>/dev/null
    return 0
}

main
exit 0
