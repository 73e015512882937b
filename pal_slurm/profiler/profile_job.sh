#!/bin/sh
# pal-slurm profiling job (submitted by `pal profile submit`): runs its arguments verbatim.
# The command line is an argument list; "$@" passes each argument unchanged, never re-parsed.
echo "pal profile job ${SLURM_JOB_ID:-?} on ${SLURMD_NODENAME:-$(hostname)} at $(date -u +%FT%TZ)" >&2
exec "$@"
