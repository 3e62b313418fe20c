/*
 * jail_enter on the real kernel (`make test`, needs root; skipped otherwise).
 * Each case runs in a forked child, so the test's own process never changes
 * namespace or root. The slurmd-side flow is covered by the lab's e2e tests;
 * this covers what they cannot reach: read-only binds, file binds, and
 * symlinks in the jail that lead out of it.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "jail.h"

static char base[] = "/var/tmp/onepool-jail-test.XXXXXX";
static char jail[PATH_MAX], node[PATH_MAX];

static void path(char *dst, const char *a, const char *b)
{
	if (strlen(a) + strlen(b) >= PATH_MAX) {
		fprintf(stderr, "path too long\n");
		exit(2);
	}
	strcpy(dst, a);
	strcat(dst, b);
}

static void write_file(const char *p, const char *text)
{
	FILE *f = fopen(p, "w");

	if (!f || fputs(text, f) < 0 || fclose(f) != 0) {
		perror(p);
		exit(2);
	}
}

static void mount_spec(struct jail_config *cfg, const char *src, const char *dst,
		       int ro, int optional)
{
	struct jail_mount *m = &cfg->mounts[cfg->nmounts++];

	path(m->src, node, src);
	snprintf(m->dst, sizeof(m->dst), "%s", dst);
	m->readonly = ro;
	m->optional = optional;
}

/* expect runs jail_enter in a child; want_err NULL means it must succeed
 * and then pass check(). */
static int expect(const char *name, const struct jail_config *cfg,
		  const char *cwd, const char *want_err, int (*check)(void))
{
	int status;
	pid_t pid = fork();

	if (pid == 0) {
		char err[JAIL_ERR_MAX];
		int used_chroot;

		if (jail_enter(cfg, cwd, &used_chroot, err, sizeof(err)) != 0) {
			if (want_err && strstr(err, want_err))
				_exit(0);
			printf("FAIL %s: error \"%s\", want %s%s\n", name, err,
			       want_err ? "one containing " : "success",
			       want_err ? want_err : "");
			_exit(1);
		}
		if (want_err) {
			printf("FAIL %s: entered the jail, want error \"%s\"\n", name, want_err);
			_exit(1);
		}
		if (used_chroot) {
			printf("FAIL %s: used chroot, want pivot_root\n", name);
			_exit(1);
		}
		_exit(check ? check() : 0);
	}
	if (pid < 0 || waitpid(pid, &status, 0) != pid) {
		perror("fork/wait");
		return 1;
	}
	return !(WIFEXITED(status) && WEXITSTATUS(status) == 0);
}

static int check_inside(void)
{
	char cwd[PATH_MAX], buf[64] = "";
	int fd, failed = 0;

	if (!getcwd(cwd, sizeof(cwd)) || strcmp(cwd, "/data/sub") != 0) {
		printf("FAIL inside: cwd %s, want /data/sub\n", cwd);
		failed = 1;
	}
	fd = open("/marker", O_RDONLY);
	if (fd < 0 || read(fd, buf, sizeof(buf) - 1) <= 0 || strcmp(buf, "jail\n") != 0) {
		printf("FAIL inside: /marker is not the jail's\n");
		failed = 1;
	}
	if (fd >= 0)
		close(fd);
	if (access("/data/sub/node-file", F_OK) != 0 ||
	    access("/etc/one-file", F_OK) != 0) {
		printf("FAIL inside: node-local dir or file not bound\n");
		failed = 1;
	}
	if (open("/ro/new", O_CREAT | O_WRONLY, 0644) >= 0 || errno != EROFS) {
		printf("FAIL inside: /ro is writable (errno %d)\n", errno);
		failed = 1;
	}
	if (access("/proc/self/mountinfo", R_OK) != 0) {
		printf("FAIL inside: no fresh /proc\n");
		failed = 1;
	}
	if (access(base, F_OK) == 0) {
		printf("FAIL inside: the node's %s is still reachable\n", base);
		failed = 1;
	}
	return failed;
}

int main(void)
{
	struct jail_config cfg;
	char p[PATH_MAX];
	int failed = 0;

	if (geteuid() != 0) {
		printf("test_enter: skipped (needs root)\n");
		return 0;
	}
	if (!mkdtemp(base)) {
		perror("mkdtemp");
		return 2;
	}
	path(jail, base, "/jail");
	path(node, base, "/node");
	mkdir(jail, 0755);
	mkdir(node, 0755);
	path(p, node, "/data"); mkdir(p, 0755);
	path(p, node, "/data/sub"); mkdir(p, 0755);
	path(p, node, "/data/sub/node-file"); write_file(p, "node\n");
	path(p, node, "/file"); write_file(p, "one file\n");
	path(p, node, "/ro"); mkdir(p, 0755);
	path(p, jail, "/marker"); write_file(p, "jail\n");
	path(p, jail, "/out"); symlink("/etc", p);

	memset(&cfg, 0, sizeof(cfg));
	snprintf(cfg.root, sizeof(cfg.root), "%s", jail);
	mount_spec(&cfg, "/data", "/data", 0, 0);
	mount_spec(&cfg, "/file", "/etc/one-file", 0, 0);
	mount_spec(&cfg, "/ro", "/ro", 1, 0);
	mount_spec(&cfg, "/absent", "/absent", 0, 1);
	failed += expect("inside", &cfg, "/data/sub", NULL, check_inside);
	failed += expect("missing cwd", &cfg, "/nowhere", "working directory /nowhere does not exist inside the jail", NULL);

	cfg.nmounts = 0;
	mount_spec(&cfg, "/data", "/out/data", 0, 0);
	failed += expect("symlink out of the jail", &cfg, "/", "leads out of the jail", NULL);

	cfg.nmounts = 0;
	mount_spec(&cfg, "/absent", "/absent", 0, 0);
	failed += expect("required source missing", &cfg, "/", "No such file or directory", NULL);

	snprintf(cfg.root, sizeof(cfg.root), "%s/none", base);
	failed += expect("no jail", &cfg, "/", "jail root", NULL);

	if (access("/etc/data", F_OK) == 0) {
		printf("FAIL symlink out of the jail: /etc/data was created on the node\n");
		failed++;
	}
	/* Nothing of the children's mounts is left in this namespace. */
	if (umount2(jail, MNT_DETACH) == 0) {
		printf("FAIL: a mount was left on %s\n", jail);
		failed++;
	}
	printf("%s: test_enter, 5 cases, %d failed\n", failed ? "FAIL" : "ok", failed);
	if (!failed) {
		char cmd[PATH_MAX + 16];

		snprintf(cmd, sizeof(cmd), "rm -rf %s", base);
		if (system(cmd) != 0)
			printf("test_enter: could not remove %s\n", base);
	}
	return failed ? 1 : 0;
}
