#!/bin/sh
# pal-epilog-slurmctld.sh - Slurm EpilogSlurmctld for pal-slurm's placer (pal placer).
#
# Runs on the controller (as SlurmUser) when a job ends. It wakes the placer at once, so a
# GPU job held for the GPUs that just came free is placed now instead of at the placer's
# next cycle: it appends one byte to the placer's wake-up file, `placer-wake` beside the
# filter state file ($PAL_FILTER_STATE, default /var/lib/pal/placer/filter-state; the same
# fixed path the submit filter computes, in a directory only the placer's user may write).
# Only a regular file is written: a FIFO or a device there could block. A missing file (no
# placer installed) means nothing to do.
#
# No Slurm command, nothing the user controls is read; ALWAYS exits 0. A site with its own
# EpilogSlurmctld calls this script from it.
# slurm.conf:  EpilogSlurmctld=/usr/lib/pal/pal-epilog-slurmctld.sh

PATH=/usr/sbin:/usr/bin:/sbin:/bin
export PATH

state="${PAL_FILTER_STATE:-/var/lib/pal/placer/filter-state}"
case "$state" in
    */*) wake="${state%/*}/placer-wake" ;;
    *) wake="placer-wake" ;;
esac
if [ -f "$wake" ] && [ ! -L "$wake" ]; then
    printf 1 >>"$wake" 2>/dev/null
fi
exit 0
