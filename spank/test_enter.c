/*
 * jail_enter on the real kernel (`make test`, needs root; skipped otherwise).
 * Each case runs in a forked child, so the test's own process never changes
 * namespace or root. The slurmd-side flow is covered by the lab's e2e tests;
 * this covers what they cannot reach: read-only binds, file binds, and
 * symlinks in the jail that lead out of it.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <sched.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
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

/* expect runs jail_enter in a child, after prep() when not NULL;
 * want_err NULL means it must succeed and then pass check(). */
static int expect(const char *name, const struct jail_config *cfg,
		  const char *cwd, const char *want_err, int (*prep)(void),
		  int (*check)(void))
{
	int status;
	pid_t pid = fork();

	if (pid == 0) {
		char err[JAIL_ERR_MAX];

		if (prep && prep() != 0) {
			printf("FAIL %s: preparing the child\n", name);
			fflush(stdout), _exit(1);
		}
		if (jail_enter(cfg, cwd, err, sizeof(err)) != 0) {
			if (want_err && strstr(err, want_err))
				fflush(stdout), _exit(0);
			printf("FAIL %s: error \"%s\", want %s%s\n", name, err,
			       want_err ? "one containing " : "success",
			       want_err ? want_err : "");
			fflush(stdout), _exit(1);
		}
		if (want_err) {
			printf("FAIL %s: entered the jail, want error \"%s\"\n", name, want_err);
			fflush(stdout), _exit(1);
		}
		status = check ? check() : 0;
		fflush(stdout);
		_exit(status);
	}
	if (pid < 0 || waitpid(pid, &status, 0) != pid) {
		perror("fork/wait");
		return 1;
	}
	return !(WIFEXITED(status) && WEXITSTATUS(status) == 0);
}

static int want_nosuid(const char *p);

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
	failed |= want_nosuid("/data");
	failed |= want_nosuid("/data/sub/mnt"); /* a mount below a bind */
	failed |= want_nosuid("/etc/one-file");
	return failed;
}

/* want_nosuid: setuid bits under path are ignored (findmnt shows nosuid). */
static int want_nosuid(const char *p)
{
	struct statvfs sv;

	if (statvfs(p, &sv) != 0) {
		printf("FAIL inside: statvfs %s: %s\n", p, strerror(errno));
		return 1;
	}
	if (!(sv.f_flag & ST_NOSUID)) {
		printf("FAIL inside: %s is bound without nosuid\n", p);
		return 1;
	}
	return 0;
}

/* with_submount: a tmpfs (suid allowed) on the node's /data/sub/mnt, in
 * the child's own mount namespace, for the bind to carry in. */
static int with_submount(void)
{
	char p[PATH_MAX];

	path(p, node, "/data/sub/mnt");
	if (unshare(CLONE_NEWNS) != 0 ||
	    mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) != 0 ||
	    mount("tmpfs", p, "tmpfs", 0, NULL) != 0) {
		perror("submount");
		return 1;
	}
	return 0;
}

/* in_plain_chroot: the child's root is a directory that is not a mount
 * point, as slurmd's in a plain chroot: pivot_root cannot work there. */
static int in_plain_chroot(void)
{
	if (chroot(base) != 0 || chdir("/") != 0) {
		perror("chroot");
		return 1;
	}
	return 0;
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
	path(p, node, "/data/sub/mnt"); mkdir(p, 0755);
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
	failed += expect("inside", &cfg, "/data/sub", NULL, with_submount, check_inside);
	failed += expect("missing cwd", &cfg, "/nowhere", "working directory /nowhere does not exist inside the jail", NULL, NULL);

	cfg.nmounts = 0;
	mount_spec(&cfg, "/data", "/out/data", 0, 0);
	failed += expect("symlink out of the jail", &cfg, "/", "leads out of the jail", NULL, NULL);

	cfg.nmounts = 0;
	mount_spec(&cfg, "/absent", "/absent", 0, 0);
	failed += expect("required source missing", &cfg, "/", "No such file or directory", NULL, NULL);

	/* Fails closed: no chroot in place of pivot_root. */
	cfg.nmounts = 0;
	snprintf(cfg.root, sizeof(cfg.root), "/jail");
	snprintf(cfg.mounts[0].src, sizeof(cfg.mounts[0].src), "/node/data");
	snprintf(cfg.mounts[0].dst, sizeof(cfg.mounts[0].dst), "/data");
	cfg.nmounts = 1;
	failed += expect("a root that cannot be pivoted", &cfg, "/", "the node's root cannot be pivoted", in_plain_chroot, NULL);

	cfg.nmounts = 0;
	snprintf(cfg.root, sizeof(cfg.root), "%s/none", base);
	failed += expect("no jail", &cfg, "/", "jail root", NULL, NULL);

	if (access("/etc/data", F_OK) == 0) {
		printf("FAIL symlink out of the jail: /etc/data was created on the node\n");
		failed++;
	}
	/* Nothing of the children's mounts is left in this namespace. */
	if (umount2(jail, MNT_DETACH) == 0) {
		printf("FAIL: a mount was left on %s\n", jail);
		failed++;
	}
	printf("%s: test_enter, 6 cases, %d failed\n", failed ? "FAIL" : "ok", failed);
	if (!failed) {
		char cmd[PATH_MAX + 16];

		snprintf(cmd, sizeof(cmd), "rm -rf %s", base);
		if (system(cmd) != 0)
			printf("test_enter: could not remove %s\n", base);
	}
	return failed ? 1 : 0;
}
