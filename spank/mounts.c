/*
 * Entering the jail: mount namespace, node-local binds, pivot_root, /proc.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <stdint.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "jail.h"

/* mount_setattr(2) (Linux 5.12), declared here: older libcs lack it. */
#ifndef SYS_mount_setattr
#define SYS_mount_setattr 442
#endif
struct jail_mount_attr {
	uint64_t attr_set, attr_clr, propagation, userns_fd;
};
#define JAIL_ATTR_RDONLY 0x00000001
#define JAIL_ATTR_NOSUID 0x00000002
#define JAIL_AT_RECURSIVE 0x8000

/*
 * restrict_bind makes the bind at target, and every mount below it,
 * nosuid (and read-only when ro): a node-local directory is never meant
 * to carry setuid binaries into a job. Where mount_setattr is missing
 * (kernels before 5.12) only the top mount is remounted, keeping the
 * flags it has (a remount clears what it is not given).
 */
static int restrict_bind(const char *target, int ro, char *err, size_t errlen)
{
	struct jail_mount_attr attr = { 0 };
	struct statvfs sv;
	unsigned long flags = MS_BIND | MS_REMOUNT | MS_NOSUID;

	attr.attr_set = JAIL_ATTR_NOSUID | (ro ? JAIL_ATTR_RDONLY : 0);
	if (syscall(SYS_mount_setattr, AT_FDCWD, target, JAIL_AT_RECURSIVE,
		    &attr, sizeof(attr)) == 0)
		return 0;
	if (errno != ENOSYS)
		return jail_fail(err, errlen, "make %s nosuid%s: %s", target,
			    ro ? " and read-only" : "", strerror(errno));
	if (statvfs(target, &sv) != 0)
		return jail_fail(err, errlen, "statvfs %s: %s", target, strerror(errno));
	if (sv.f_flag & ST_NODEV)
		flags |= MS_NODEV;
	if (sv.f_flag & ST_NOEXEC)
		flags |= MS_NOEXEC;
	if (sv.f_flag & ST_NOATIME)
		flags |= MS_NOATIME;
	if (sv.f_flag & ST_NODIRATIME)
		flags |= MS_NODIRATIME;
	if (sv.f_flag & ST_RELATIME)
		flags |= MS_RELATIME;
	if (ro || (sv.f_flag & ST_RDONLY))
		flags |= MS_RDONLY;
	if (mount(NULL, target, NULL, flags, NULL) != 0)
		return jail_fail(err, errlen, "make %s nosuid%s: %s", target,
			    ro ? " and read-only" : "", strerror(errno));
	return 0;
}

static int inside(const char *path, const char *root)
{
	size_t n = strlen(root);

	return strncmp(path, root, n) == 0 && (path[n] == '/' || path[n] == '\0');
}

/* stays_inside is true when path exists and, symlinks resolved as the node
 * sees them, is root or below it. */
static int stays_inside(const char *path, const char *root)
{
	char real[PATH_MAX];

	if (!realpath(path, real))
		return 0;
	return inside(real, root);
}

/*
 * make_target makes sure the mount point root+dst exists with the right
 * type, creating what is missing (directories 0755, an empty file 0644 for
 * a file source), and that no symlink in the jail leads it out of the jail:
 * the jail is shared and writable by its admins, the node's mounts are not
 * theirs to redirect.
 */
static int make_target(const char *root, const char *dst, int dir,
		       char *err, size_t errlen)
{
	char path[PATH_MAX];
	size_t rootlen = strlen(root), i;
	struct stat st;

	if (rootlen + strlen(dst) >= sizeof(path))
		return jail_fail(err, errlen, "%s%s: path too long", root, dst);
	strcpy(path, root);
	strcat(path, dst);

	/* Each component below the root, shortest first. */
	for (i = rootlen + 1; ; i++) {
		char c = path[i];
		int last = (c == '\0');

		if (c != '/' && !last)
			continue;
		path[i] = '\0';
		if (lstat(path, &st) == 0) {
			if (S_ISLNK(st.st_mode) && !stays_inside(path, root)) {
				jail_fail(err, errlen,
				     "mount point %s: the symlink %s leads out of the jail",
				     dst, path);
				return -1;
			}
		} else if (errno != ENOENT) {
			return jail_fail(err, errlen, "mount point %s: %s: %s", dst,
				    path, strerror(errno));
		} else if (!last || dir) {
			if (mkdir(path, 0755) != 0 && errno != EEXIST)
				return jail_fail(err, errlen,
					    "mount point %s: mkdir %s: %s", dst,
					    path, strerror(errno));
		} else {
			int fd = open(path, O_WRONLY | O_CREAT | O_EXCL |
					    O_NOFOLLOW | O_CLOEXEC, 0644);

			if (fd < 0 && errno != EEXIST)
				return jail_fail(err, errlen,
					    "mount point %s: create %s: %s", dst,
					    path, strerror(errno));
			if (fd >= 0)
				close(fd);
		}
		if (last)
			break;
		path[i] = '/';
	}
	if (!stays_inside(path, root))
		return jail_fail(err, errlen, "mount point %s leads out of the jail", dst);
	if (stat(path, &st) != 0)
		return jail_fail(err, errlen, "mount point %s: %s", dst, strerror(errno));
	if (dir && !S_ISDIR(st.st_mode))
		return jail_fail(err, errlen,
			    "mount point %s: a directory on the node, not one in the jail",
			    dst);
	if (!dir && S_ISDIR(st.st_mode))
		return jail_fail(err, errlen,
			    "mount point %s: a file on the node, a directory in the jail",
			    dst);
	return 0;
}

static int bind_one(const char *root, const struct jail_mount *m, char *err,
		    size_t errlen)
{
	char target[PATH_MAX];
	struct stat st;
	int dir;

	if (stat(m->src, &st) != 0) {
		if (errno == ENOENT && m->optional)
			return 0;
		return jail_fail(err, errlen, "node-local %s: %s", m->src,
			    strerror(errno));
	}
	dir = S_ISDIR(st.st_mode);
	if (make_target(root, m->dst, dir, err, errlen))
		return -1;
	snprintf(target, sizeof(target), "%s%s", root, m->dst);
	if (mount(m->src, target, NULL, MS_BIND | (dir ? MS_REC : 0), NULL) != 0)
		return jail_fail(err, errlen, "bind %s on %s: %s", m->src, target,
			    strerror(errno));
	return restrict_bind(target, m->readonly, err, errlen);
}

/* Why a step does not start where the jail cannot be pivoted into. */
#define NO_PIVOT \
	"jail %s: the node's root cannot be pivoted (slurmd runs in a chroot that is not a mount point, or on an initramfs root); the step is not run outside a pivoted jail"

int jail_enter(const struct jail_config *cfg, const char *cwd, char *err,
	       size_t errlen)
{
	char root[PATH_MAX];
	struct stat st;
	int i;

	if (!realpath(cfg->root, root))
		return jail_fail(err, errlen, "jail root %s: %s", cfg->root,
			    strerror(errno));
	if (stat(root, &st) != 0 || !S_ISDIR(st.st_mode))
		return jail_fail(err, errlen, "jail root %s is not a directory", root);
	if (strcmp(root, "/") == 0)
		return jail_fail(err, errlen, "jail root %s is the node's own root",
			    cfg->root);

	if (unshare(CLONE_NEWNS) != 0)
		return jail_fail(err, errlen, "unshare(CLONE_NEWNS): %s", strerror(errno));
	/* Slave, not private: mounts the node makes later (shared storage
	 * coming back) still reach the job, nothing of the job's leaks out. */
	if (mount(NULL, "/", NULL, MS_REC | MS_SLAVE, NULL) != 0) {
		if (errno == EINVAL) /* "/" is no mount point: a plain chroot */
			return jail_fail(err, errlen, NO_PIVOT, root);
		return jail_fail(err, errlen, "make / rslave: %s", strerror(errno));
	}
	/* pivot_root needs the new root to be a mount point. */
	if (mount(root, root, NULL, MS_BIND | MS_REC, NULL) != 0)
		return jail_fail(err, errlen, "bind %s on itself: %s", root,
			    strerror(errno));
	for (i = 0; i < cfg->nmounts; i++)
		if (bind_one(root, &cfg->mounts[i], err, errlen))
			return -1;
	if (make_target(root, "/proc", 1, err, errlen))
		return -1;

	if (chdir(root) != 0)
		return jail_fail(err, errlen, "chdir %s: %s", root, strerror(errno));
	/* pivot_root(".", ".") stacks the old root on the new one; detaching
	 * it leaves nothing of the node reachable but what was bound in. */
	if (syscall(SYS_pivot_root, ".", ".") == 0) {
		if (umount2(".", MNT_DETACH) != 0)
			return jail_fail(err, errlen, "detach the node's root: %s",
				    strerror(errno));
	} else if (errno == EINVAL) {
		/* A root that cannot be pivoted (an initramfs, or slurmd in a
		 * chroot that is not a mount point). chroot would keep the
		 * step's files in the jail, but a process that regains root
		 * climbs out of a chroot: the step is not run at all. */
		return jail_fail(err, errlen, NO_PIVOT, root);
	} else {
		return jail_fail(err, errlen, "pivot_root %s: %s", root, strerror(errno));
	}
	if (chdir("/") != 0)
		return jail_fail(err, errlen, "chdir / in the jail: %s", strerror(errno));
	if (mount("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC,
		  NULL) != 0)
		return jail_fail(err, errlen, "mount a fresh /proc: %s", strerror(errno));
	if (chdir(cwd) != 0) {
		if (errno == ENOENT || errno == ENOTDIR)
			return jail_fail(err, errlen,
				    "working directory %s does not exist inside the jail %s (create it there, or use --chdir)",
				    cwd, cfg->root);
		return jail_fail(err, errlen, "working directory %s in the jail: %s",
			    cwd, strerror(errno));
	}
	return 0;
}
