/*
 * pal_spank.c - SPANK plugin adding --pal-class=A|B|C|D|auto|off to sbatch,
 * salloc and srun.
 *
 * The plugin only validates the value.  Slurm itself forwards a SPANK
 * option's value to slurmctld in the job's spank_job_env as
 * _SLURM_SPANK_OPTION_pal_pal_class=<value>, where job_submit.lua reads it as
 * the job's class hint.  An invalid value is refused at submit with a one-line
 * error naming the allowed values: a mistake in our own option, reported
 * before the job exists (the submit filter itself never rejects a job).
 *
 * The option is registered with spank_option_register() in slurm_spank_init
 * because the static spank_options table is not seen by sbatch/salloc.
 * The same source builds against Slurm 22.05 and 24.11 headers; build it on
 * the machine where it runs (a plugin built for another Slurm version aborts
 * every client: "Incompatible Slurm plugin version").
 */

#include <stddef.h>
#include <strings.h>

#include <slurm/spank.h>

#include "pal_spank.h"

SPANK_PLUGIN(pal, 1);

static const char *const pal_classes[] = { "A", "B", "C", "D", "auto", "off", NULL };

/* Non-zero when value is one of pal_classes (case-insensitive). */
static int pal_class_valid(const char *value)
{
	int i;

	if (value == NULL)
		return 0;
	for (i = 0; pal_classes[i] != NULL; i++) {
		if (strcasecmp(value, pal_classes[i]) == 0)
			return 1;
	}
	return 0;
}

static int pal_class_cb(int val, const char *optarg, int remote)
{
	(void) val;
	if (remote)
		return 0;	/* validated where the user typed it */
	if (!pal_class_valid(optarg)) {
		slurm_error("pal: invalid --pal-class value '%s': use one of A, B, C, D, auto, off",
			    optarg ? optarg : "");
		return -1;
	}
	return 0;
}

static struct spank_option pal_class_option = {
	PAL_SPANK_OPTION_NAME,
	"A|B|C|D|auto|off",
	"GPU variability class hint for pal-slurm placement: A (most sensitive) .. D, "
	"auto (decided from the job's history), off (do not re-place this job)",
	1,
	0,
	pal_class_cb,
};

int slurm_spank_init(spank_t sp, int ac, char **av)
{
	spank_context_t ctx = spank_context();
	spank_err_t rc;

	(void) ac;
	(void) av;
	if (ctx != S_CTX_LOCAL && ctx != S_CTX_ALLOCATOR && ctx != S_CTX_REMOTE)
		return 0;
	rc = spank_option_register(sp, &pal_class_option);
	if (rc != ESPANK_SUCCESS)
		slurm_error("pal: cannot register --pal-class: %s", spank_strerror(rc));
	return 0;	/* never fail a job because of this plugin */
}
