/*
 * Parsing and checking of the plugstack.conf arguments. No file is touched
 * here: whether the jail exists is checked on the node, per step.
 */
#define _GNU_SOURCE
#include <stdio.h>
#include <string.h>

#include "jail.h"

/* NVIDIA's user-space driver files: bound read-only from the node when they
 * exist there, so that CUDA in the jail always matches the node's kernel
 * driver. The device files themselves come with /dev. */
static const char *const gpu_files[] = {
	"/usr/bin/nvidia-smi",
	"/usr/lib/x86_64-linux-gnu/libcuda.so.1",
	"/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1",
	"/usr/lib/x86_64-linux-gnu/libnvidia-ptxjitcompiler.so.1",
};

/* check_path accepts an absolute path without "." or ".." components that
 * fits, with the jail root in front of it, in PATH_MAX. */
static int check_path(const char *what, const char *p, char *err,
		      size_t errlen)
{
	const char *c;
	size_t n = strlen(p);

	if (n == 0)
		return jail_fail(err, errlen, "%s: empty path", what);
	if (p[0] != '/')
		return jail_fail(err, errlen, "%s: '%s' is not an absolute path",
			    what, p);
	if (n >= PATH_MAX / 2)
		return jail_fail(err, errlen, "%s: path longer than %d bytes", what,
			    PATH_MAX / 2 - 1);
	for (c = p; *c; ) {
		size_t len;

		while (*c == '/')
			c++;
		len = strcspn(c, "/");
		if ((len == 1 && c[0] == '.') ||
		    (len == 2 && c[0] == '.' && c[1] == '.'))
			return jail_fail(err, errlen,
				    "%s: '%s' has a '.' or '..' component",
				    what, p);
		c += len;
	}
	return 0;
}

/* copy_path copies p without trailing slashes ("/" stays "/"). */
static void copy_path(char *dst, const char *p)
{
	size_t n = strlen(p);

	while (n > 1 && p[n - 1] == '/')
		n--;
	memcpy(dst, p, n);
	dst[n] = '\0';
}

static int is_under(const char *path, const char *dir)
{
	size_t n = strlen(dir);

	if (strcmp(dir, "/") == 0)
		return 1;
	return strncmp(path, dir, n) == 0 && (path[n] == '/' || path[n] == '\0');
}

static int add_mount(struct jail_config *cfg, const char *src, const char *dst,
		     int readonly, int optional, char *err, size_t errlen)
{
	struct jail_mount *m;

	if (cfg->nmounts >= JAIL_MAX_MOUNTS)
		return jail_fail(err, errlen, "more than %d mounts", JAIL_MAX_MOUNTS);
	if (check_path("mount source", src, err, errlen) ||
	    check_path("mount target", dst, err, errlen))
		return -1;
	if (strcmp(dst, "/") == 0)
		return jail_fail(err, errlen,
			    "mount target '/': the jail root itself cannot be replaced");
	if (is_under(dst, "/proc"))
		return jail_fail(err, errlen,
			    "mount target '%s': /proc is always mounted fresh", dst);
	m = &cfg->mounts[cfg->nmounts++];
	copy_path(m->src, src);
	copy_path(m->dst, dst);
	m->readonly = readonly;
	m->optional = optional;
	return 0;
}

/* parse_local adds each directory of a comma-separated list, bound at the
 * same path. */
static int parse_local(struct jail_config *cfg, const char *list, char *err,
		       size_t errlen)
{
	char buf[PATH_MAX];
	char *save = NULL, *tok;

	if (strlen(list) >= sizeof(buf))
		return jail_fail(err, errlen, "local=: list longer than %zu bytes",
			    sizeof(buf) - 1);
	strcpy(buf, list);
	for (tok = strtok_r(buf, ",", &save); tok;
	     tok = strtok_r(NULL, ",", &save))
		if (add_mount(cfg, tok, tok, 0, 0, err, errlen))
			return -1;
	return 0;
}

/* parse_bind reads [?]SRC[:DST][:ro|:rw]. */
static int parse_bind(struct jail_config *cfg, const char *spec, char *err,
		      size_t errlen)
{
	char buf[PATH_MAX];
	char *parts[3] = { NULL, NULL, NULL };
	char *save = NULL, *tok, *src;
	int n = 0, readonly = 0, optional = 0;

	if (strlen(spec) >= sizeof(buf))
		return jail_fail(err, errlen, "bind=: longer than %zu bytes",
			    sizeof(buf) - 1);
	strcpy(buf, spec);
	for (tok = strtok_r(buf, ":", &save); tok;
	     tok = strtok_r(NULL, ":", &save)) {
		if (n == 3)
			return jail_fail(err, errlen,
				    "bind=%s: expected [?]SRC[:DST][:ro|rw]", spec);
		parts[n++] = tok;
	}
	if (n == 0)
		return jail_fail(err, errlen, "bind=: empty");
	if (n >= 2 && (strcmp(parts[n - 1], "ro") == 0 ||
		       strcmp(parts[n - 1], "rw") == 0)) {
		readonly = strcmp(parts[n - 1], "ro") == 0;
		parts[--n] = NULL;
	}
	if (n == 3)
		return jail_fail(err, errlen,
			    "bind=%s: the third field must be ro or rw", spec);
	src = parts[0];
	if (src[0] == '?') {
		optional = 1;
		src++;
	}
	return add_mount(cfg, src, n == 2 ? parts[1] : src, readonly, optional,
			 err, errlen);
}

int jail_parse_args(struct jail_config *cfg, int argc, char **argv,
		    char *err, size_t errlen)
{
	const char *local = JAIL_DEFAULT_LOCAL;
	int gpu = 1, i;
	size_t k;

	memset(cfg, 0, sizeof(*cfg));
	if (err && errlen)
		err[0] = '\0';

	/* Everything but bind= first: bind= mounts come after the local ones,
	 * in the order given, so that they can land inside them. */
	for (i = 0; i < argc; i++) {
		const char *a = argv[i];

		if (strncmp(a, "root=", 5) == 0) {
			if (check_path("root=", a + 5, err, errlen))
				return -1;
			copy_path(cfg->root, a + 5);
		} else if (strncmp(a, "local=", 6) == 0) {
			local = a + 6;
		} else if (strcmp(a, "gpu=auto") == 0) {
			gpu = 1;
		} else if (strcmp(a, "gpu=off") == 0) {
			gpu = 0;
		} else if (strncmp(a, "bind=", 5) != 0) {
			return jail_fail(err, errlen,
				    "unknown argument '%s' (known: root=DIR local=DIR,... bind=[?]SRC[:DST][:ro] gpu=auto|off)",
				    a);
		}
	}
	if (cfg->root[0] == '\0')
		return jail_fail(err, errlen, "root= is required (the jail's root directory)");
	if (strcmp(cfg->root, "/") == 0)
		return jail_fail(err, errlen, "root=/: the jail cannot be the node's own root");
	if (parse_local(cfg, local, err, errlen))
		return -1;
	if (gpu)
		for (k = 0; k < sizeof(gpu_files) / sizeof(gpu_files[0]); k++)
			if (add_mount(cfg, gpu_files[k], gpu_files[k], 1, 1, err,
				      errlen))
				return -1;
	for (i = 0; i < argc; i++)
		if (strncmp(argv[i], "bind=", 5) == 0 &&
		    parse_bind(cfg, argv[i] + 5, err, errlen))
			return -1;

	/* A node-local directory bound recursively into a jail that lives
	 * inside it would hold the jail again. */
	for (i = 0; i < cfg->nmounts; i++)
		if (is_under(cfg->root, cfg->mounts[i].src))
			return jail_fail(err, errlen,
				    "root=%s is inside the node-local '%s'",
				    cfg->root, cfg->mounts[i].src);
	return 0;
}
