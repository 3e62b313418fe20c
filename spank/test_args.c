/*
 * Table-driven tests of the plugstack.conf argument parser (`make test`).
 * Built with AddressSanitizer and UBSan, so an overrun of a bounded buffer
 * fails here.
 */
#define _GNU_SOURCE
#include <stdio.h>
#include <string.h>

#include "jail.h"

#define MAXARGS 8

struct want_mount {
	const char *src, *dst;
	int readonly, optional;
};

struct tcase {
	const char *name;
	const char *args[MAXARGS];
	const char *err;		/* substring of the error; NULL: success */
	int nmounts;			/* checked when err is NULL */
	struct want_mount first;	/* mounts[0] when err is NULL */
	struct want_mount last;		/* mounts[nmounts-1] when err is NULL */
};

static char long_path[PATH_MAX + 16];

static const struct tcase cases[] = {
	{ "defaults", { "root=/jail" }, NULL, 9,
	  { "/dev", "/dev", 0, 0 },
	  { "/usr/lib/x86_64-linux-gnu/libnvidia-ptxjitcompiler.so.1",
	    "/usr/lib/x86_64-linux-gnu/libnvidia-ptxjitcompiler.so.1", 1, 1 } },
	{ "gpu off", { "root=/jail", "gpu=off" }, NULL, 5,
	  { "/dev", "/dev", 0, 0 }, { "/var/spool/slurmd", "/var/spool/slurmd", 0, 0 } },
	{ "local replaces the defaults", { "root=/jail/", "local=/dev,/scratch/", "gpu=off" }, NULL, 2,
	  { "/dev", "/dev", 0, 0 }, { "/scratch", "/scratch", 0, 0 } },
	{ "bind with target and ro", { "root=/jail", "gpu=off", "local=/dev", "bind=/opt/drv:/usr/local/drv:ro" }, NULL, 2,
	  { "/dev", "/dev", 0, 0 }, { "/opt/drv", "/usr/local/drv", 1, 0 } },
	{ "optional bind, same path", { "root=/jail", "gpu=off", "local=", "bind=?/etc/slurm:ro" }, NULL, 1,
	  { "/etc/slurm", "/etc/slurm", 1, 1 }, { "/etc/slurm", "/etc/slurm", 1, 1 } },
	{ "bind order kept after local", { "bind=/a:/b:rw", "root=/j", "gpu=off", "local=/tmp" }, NULL, 2,
	  { "/tmp", "/tmp", 0, 0 }, { "/a", "/b", 0, 0 } },
	{ "root missing", { "local=/dev" }, "root= is required", 0, { 0 }, { 0 } },
	{ "root is /", { "root=/" }, "cannot be the node's own root", 0, { 0 }, { 0 } },
	{ "root is // (still /)", { "root=//" }, "cannot be the node's own root", 0, { 0 }, { 0 } },
	{ "root relative", { "root=jail" }, "not an absolute path", 0, { 0 }, { 0 } },
	{ "root with ..", { "root=/srv/../etc" }, "'.' or '..'", 0, { 0 }, { 0 } },
	{ "root with .", { "root=/srv/./jail" }, "'.' or '..'", 0, { 0 }, { 0 } },
	{ "root empty", { "root=" }, "empty path", 0, { 0 }, { 0 } },
	{ "root too long", { long_path }, "path longer than", 0, { 0 }, { 0 } },
	{ "unknown argument", { "root=/jail", "chroot=yes" }, "unknown argument 'chroot=yes'", 0, { 0 }, { 0 } },
	{ "gpu bad value", { "root=/jail", "gpu=on" }, "unknown argument 'gpu=on'", 0, { 0 }, { 0 } },
	{ "local relative", { "root=/jail", "local=dev" }, "not an absolute path", 0, { 0 }, { 0 } },
	{ "local with ..", { "root=/jail", "local=/tmp/../etc" }, "'.' or '..'", 0, { 0 }, { 0 } },
	{ "proc is never bound", { "root=/jail", "local=/proc" }, "/proc is always mounted fresh", 0, { 0 }, { 0 } },
	{ "proc below either", { "root=/jail", "bind=/x:/proc/sys" }, "/proc is always mounted fresh", 0, { 0 }, { 0 } },
	{ "bind onto the jail root", { "root=/jail", "bind=/x:/" }, "cannot be replaced", 0, { 0 }, { 0 } },
	{ "bind too many fields", { "root=/jail", "bind=/a:/b:ro:x" }, "expected [?]SRC", 0, { 0 }, { 0 } },
	{ "bind bad mode", { "root=/jail", "bind=/a:/b:rx" }, "must be ro or rw", 0, { 0 }, { 0 } },
	{ "bind empty", { "root=/jail", "bind=" }, "bind=: empty", 0, { 0 }, { 0 } },
	{ "jail inside a node-local dir", { "root=/tmp/jail" }, "is inside the node-local '/tmp'", 0, { 0 }, { 0 } },
	{ "jail inside a bind source", { "root=/srv/jail", "bind=/srv:/mnt" }, "inside the node-local '/srv'", 0, { 0 }, { 0 } },
};

static int check_mount(const char *name, const char *which,
		       const struct jail_mount *got, const struct want_mount *w)
{
	if (strcmp(got->src, w->src) || strcmp(got->dst, w->dst) ||
	    got->readonly != w->readonly || got->optional != w->optional) {
		printf("FAIL %s: %s mount = {%s %s ro=%d opt=%d}, want {%s %s ro=%d opt=%d}\n",
		       name, which, got->src, got->dst, got->readonly, got->optional,
		       w->src, w->dst, w->readonly, w->optional);
		return 1;
	}
	return 0;
}

static int run(const struct tcase *tc)
{
	static struct jail_config cfg;
	char err[JAIL_ERR_MAX];
	char *argv[MAXARGS];
	int argc = 0, rc;

	while (argc < MAXARGS && tc->args[argc]) {
		argv[argc] = (char *)tc->args[argc];
		argc++;
	}
	rc = jail_parse_args(&cfg, argc, argv, err, sizeof(err));
	if (tc->err) {
		if (rc == 0) {
			printf("FAIL %s: accepted, want error containing \"%s\"\n", tc->name, tc->err);
			return 1;
		}
		if (!strstr(err, tc->err)) {
			printf("FAIL %s: error \"%s\", want it to contain \"%s\"\n", tc->name, err, tc->err);
			return 1;
		}
		return 0;
	}
	if (rc != 0) {
		printf("FAIL %s: rejected: %s\n", tc->name, err);
		return 1;
	}
	if (cfg.nmounts != tc->nmounts) {
		printf("FAIL %s: %d mounts, want %d\n", tc->name, cfg.nmounts, tc->nmounts);
		return 1;
	}
	if (strchr(cfg.root, '\0')[-1] == '/' && strcmp(cfg.root, "/") != 0) {
		printf("FAIL %s: root %s keeps a trailing slash\n", tc->name, cfg.root);
		return 1;
	}
	return check_mount(tc->name, "first", &cfg.mounts[0], &tc->first) +
	       check_mount(tc->name, "last", &cfg.mounts[cfg.nmounts - 1], &tc->last);
}

/* Too many mounts is an error, never an overrun. */
static int run_too_many(void)
{
	static struct jail_config cfg;
	static char specs[JAIL_MAX_MOUNTS + 2][32];
	char *argv[JAIL_MAX_MOUNTS + 3];
	char err[JAIL_ERR_MAX];
	int i, argc = 0;

	argv[argc++] = "root=/jail";
	for (i = 0; i < JAIL_MAX_MOUNTS + 2; i++) {
		snprintf(specs[i], sizeof(specs[i]), "bind=/src%d", i);
		argv[argc++] = specs[i];
	}
	if (jail_parse_args(&cfg, argc, argv, err, sizeof(err)) == 0 ||
	    !strstr(err, "more than")) {
		printf("FAIL too many mounts: got \"%s\"\n", err);
		return 1;
	}
	return 0;
}

int main(void)
{
	size_t i;
	int failed = 0;

	memcpy(long_path, "root=", 5);
	memset(long_path + 5, 'a', PATH_MAX);
	long_path[5] = '/';
	long_path[PATH_MAX + 5] = '\0';

	for (i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
		failed += run(&cases[i]);
	failed += run_too_many();
	printf("%s: %zu cases, %d failed\n", failed ? "FAIL" : "ok",
	       sizeof(cases) / sizeof(cases[0]) + 1, failed);
	return failed ? 1 : 0;
}
