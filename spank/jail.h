/*
 * onepool-jail: run every Slurm job step inside a shared root filesystem.
 *
 * jail.h is the plugin's core, free of Slurm headers so that it can be unit
 * tested (test_args.c) and reasoned about apart from the SPANK glue.
 */
#ifndef ONEPOOL_JAIL_H
#define ONEPOOL_JAIL_H

#include <limits.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>

/* Every buffer in the plugin is one of these sizes; nothing grows. */
#define JAIL_MAX_MOUNTS 32
#define JAIL_ERR_MAX 1024

struct jail_mount {
	char src[PATH_MAX];	/* on the node */
	char dst[PATH_MAX];	/* inside the jail */
	int readonly;
	int optional;		/* skipped where src does not exist on the node */
};

struct jail_config {
	char root[PATH_MAX];
	struct jail_mount mounts[JAIL_MAX_MOUNTS];
	int nmounts;
};

/* The node-local directories bound at the same path when local= is absent.
 * /proc is not among them: the jail always gets a fresh proc mount. */
#define JAIL_DEFAULT_LOCAL "/dev,/sys,/run,/tmp,/var/spool/slurmd"

/* jail_fail formats a message into err (truncated to errlen) and returns -1. */
static inline int jail_fail(char *err, size_t errlen, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

static inline int jail_fail(char *err, size_t errlen, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(err, errlen, fmt, ap);
	va_end(ap);
	return -1;
}

/*
 * jail_parse_args fills cfg from the plugstack.conf arguments. It touches no
 * file: it checks syntax only (absolute paths, no "." or "..", sizes).
 * Returns 0, or -1 with a message in err.
 */
int jail_parse_args(struct jail_config *cfg, int argc, char **argv,
		    char *err, size_t errlen);

/*
 * jail_enter moves the calling process into the jail: a new mount namespace
 * (propagation from the node only), the node-local mounts bound in,
 * nosuid (read-only where asked), pivot_root, a fresh /proc, and cwd as
 * the working directory inside the jail. It must run as root. A root that
 * cannot be pivoted is an error (no chroot fallback: a process that
 * regains root climbs out of a chroot). On error the process may be left
 * half-way (its own mount namespace, old root): the caller must then not
 * let it run anything.
 * Returns 0, or -1 with a message in err.
 */
int jail_enter(const struct jail_config *cfg, const char *cwd, char *err,
	       size_t errlen);

#endif
