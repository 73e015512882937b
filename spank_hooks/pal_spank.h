/*
 * pal_spank.h - names shared between the pal SPANK plugin and the submit filter.
 *
 * Slurm forwards a SPANK option to slurmctld in the job's spank_job_env as
 * _SLURM_SPANK_OPTION_<plugin>_<option>=<value> (non-alphanumerics of the
 * option name become '_').  job_submit.lua looks for PAL_SPANK_OPTION_ENV;
 * change both together.
 */
#ifndef PAL_SPANK_H
#define PAL_SPANK_H

#define PAL_SPANK_OPTION_NAME "pal-class"
#define PAL_SPANK_OPTION_ENV  "_SLURM_SPANK_OPTION_pal_pal_class"

#endif /* PAL_SPANK_H */
