/*
 * The SPANK glue: which steps are jailed, and failing closed.
 *
 * The jail is made per task in task_init_privileged, the last callback that
 * runs as root in the task's own process, so slurmstepd itself stays on the
 * node (its plugins, config and libraries need not exist in the jail).
 *
 * Failing closed: any error returns -1 from task_init_privileged, and the
 * task exits with status 1 before it execs anything. (A positive ESPANK_*
 * code there is only logged: the task would run, outside the jail.) By then
 * slurmstepd's log already goes to the step's stderr as well as to the slurmd
 * log, so slurm_error reaches both the admin and the user.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include <slurm/slurm.h>
#include <slurm/spank.h>

#include "jail.h"

SPANK_PLUGIN(onepool_jail, 1);

/* SPANK keeps one copy of the plugin per slurmstepd: these belong to one
 * step (and, after fork, to one task). */
static struct jail_config cfg;
static char args_error[JAIL_ERR_MAX];	/* plugstack.conf arguments rejected */

/* jailed_step is true for batch, interactive and normal steps; the extern
 * step (and anything Slurm adds later) stays on the node. */
static int jailed_step(uint32_t stepid)
{
	return stepid <= SLURM_MAX_NORMAL_STEP_ID ||
	       stepid == SLURM_BATCH_SCRIPT || stepid == SLURM_INTERACTIVE_STEP;
}

static void step_name(uint32_t stepid, char *buf, size_t n)
{
	if (stepid == SLURM_BATCH_SCRIPT)
		snprintf(buf, n, "batch");
	else if (stepid == SLURM_INTERACTIVE_STEP)
		snprintf(buf, n, "interactive");
	else
		snprintf(buf, n, "%u", stepid);
}

int slurm_spank_init(spank_t sp, int ac, char **av)
{
	char err[JAIL_ERR_MAX];

	if (spank_remote(sp) != 1)
		return ESPANK_SUCCESS;
	if (jail_parse_args(&cfg, ac, av, err, sizeof(err)) != 0) {
		/* Reported per task, where the user can see it. */
		snprintf(args_error, sizeof(args_error),
			 "bad plugstack.conf arguments: %.900s", err);
		slurm_error("onepool-jail: %s", args_error);
	}
	return ESPANK_SUCCESS;
}

int slurm_spank_task_init_privileged(spank_t sp, int ac, char **av)
{
	uint32_t jobid = 0, stepid = 0;
	char cwd[PATH_MAX], err[JAIL_ERR_MAX], step[32];

	(void)ac;
	(void)av;
	if (spank_remote(sp) != 1)
		return ESPANK_SUCCESS;
	if (spank_get_item(sp, S_JOB_ID, &jobid) != ESPANK_SUCCESS ||
	    spank_get_item(sp, S_JOB_STEPID, &stepid) != ESPANK_SUCCESS) {
		snprintf(err, sizeof(err), "cannot read the job and step ids");
	} else if (!jailed_step(stepid)) {
		return ESPANK_SUCCESS;
	} else if (args_error[0]) {
		snprintf(err, sizeof(err), "%s", args_error);
	} else if (!getcwd(cwd, sizeof(cwd))) {
		snprintf(err, sizeof(err), "getcwd: %s", strerror(errno));
	} else if (jail_enter(&cfg, cwd, err, sizeof(err)) == 0) {
		slurm_debug("onepool-jail: job %u: step entered %s", jobid,
			    cfg.root);
		return ESPANK_SUCCESS;
	}

	step_name(stepid, step, sizeof(step));
	slurm_error("onepool-jail: job %u step %s not started: %s", jobid, step, err);
	return -1;
}
