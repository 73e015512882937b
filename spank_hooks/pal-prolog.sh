#!/bin/sh
# pal-prolog.sh - Slurm Prolog for pal-slurm's node agent (pal agent).
#
# Runs as root in slurmd on every node of a job before the job starts there. It records
# which GPUs the job got on this node, for the agent's per-job GPU profiles, the way
# dcgm-exporter's HPC job mapping does: one small file per job, written atomically
# (temporary file + rename) into $PAL_JOBMAP_DIR (default /run/pal/jobs; "%n" in it
# is replaced by the node name, for several slurmds on one test host).
#
# It runs no Slurm command and nothing the user controls reaches a shell: every value
# is only printed into the file, with newlines removed. It ALWAYS exits 0: a failing
# Prolog would drain the node and requeue the job, and pal-slurm never costs a job
# anything. Jobs without GPUs on this node get no file.
#
# slurm.conf:  Prolog=/usr/lib/pal/pal-prolog.sh   Epilog=/usr/lib/pal/pal-epilog.sh
# File format: pal-jobmap/1 (see pal_slurm/agent/jobmap.py and docs/agent.md).

# slurmd gives Prolog/Epilog no PATH at all (seen on 22.05): use the system's, never the caller's.
PATH=/usr/sbin:/usr/bin:/sbin:/bin
export PATH

# One line, no CR/LF, at most 255 characters.
clean() {
    printf '%s' "$1" | tr '\r\n' '  ' | cut -c1-255
}

main() {
    job="${SLURM_JOB_ID:-}"
    case "$job" in
        '' | *[!0-9]*) return 0 ;;
    esac
    gpus="${SLURM_JOB_GPUS:-${CUDA_VISIBLE_DEVICES:-}}"
    case "$gpus" in
        '' | NoDevFiles) return 0 ;;
    esac
    case "$gpus" in
        *[!0-9,-]*) return 0 ;;  # not a list of GPU ids: nothing the agent could map
    esac
    dir="${PAL_JOBMAP_DIR:-/run/pal/jobs}"
    node="${SLURMD_NODENAME:-$(hostname 2>/dev/null)}"
    case "$dir" in
        *%n*) dir="$(printf '%s' "$dir" | sed "s/%n/$(clean "$node" | tr -cd 'A-Za-z0-9._-')/g")" ;;
    esac
    umask 077  # root's agent reads the map; other users may not see who runs what (PrivateData=jobs)
    mkdir -p "$dir" 2>/dev/null || return 0
    start="$(date +%s 2>/dev/null)"
    tmp="$dir/.$job.$$.tmp"
    {
        printf 'format=pal-jobmap/1\n'
        printf 'job_id=%s\n' "$job"
        printf 'user=%s\n' "$(clean "${SLURM_JOB_USER:-}")"
        printf 'uid=%s\n' "$(clean "${SLURM_JOB_UID:-}")"
        printf 'gpus=%s\n' "$gpus"
        printf 'cuda_visible_devices=%s\n' "$(clean "${CUDA_VISIBLE_DEVICES:-}")"
        printf 'partition=%s\n' "$(clean "${SLURM_JOB_PARTITION:-}")"
        printf 'account=%s\n' "$(clean "${SLURM_JOB_ACCOUNT:-}")"
        printf 'name=%s\n' "$(clean "${SLURM_JOB_NAME:-}")"
        case "$start" in
            '' | *[!0-9]*) ;;  # no usable date: the agent takes the file's mtime
            *) printf 'start=%s\n' "$start" ;;
        esac
    } >"$tmp" 2>/dev/null && mv -f "$tmp" "$dir/$job.job" 2>/dev/null
    rm -f "$tmp" 2>/dev/null
    return 0
}

main
exit 0
