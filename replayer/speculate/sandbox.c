/* The speculative copy's world: everything read-only, writes land in small tmpfs mounts, a
 * minimal /dev, its own /proc; and a process that cannot raise its priority or regain caps. */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/capability.h>
#include <sched.h>
#include <stdio.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include "spec.h"

#define IOPRIO_CLASS_BE 2
#define IOPRIO_CLASS_IDLE 3
#define IOPRIO_PRIO_VALUE(c, d) (((c) << 13) | (d))
#define IOPRIO_WHO_PROCESS 1

static int path_join(char *out, size_t n, const char *root, const char *sub)
{
	int r = snprintf(out, n, "%s%s", strcmp(root, "/") ? root : "", sub);
	return (r < 0 || (size_t)r >= n) ? -ENAMETOOLONG : 0;
}

static int is_dir(const char *p)
{
	struct stat st;
	return stat(p, &st) == 0 && S_ISDIR(st.st_mode);
}

/* A fresh tmpfs at root+sub, if that directory exists (the copy's writes go there). */
static int tmpfs_at(const char *root, const char *sub, unsigned mb, const char *extra)
{
	char p[PATH_MAX], data[128];
	int r = path_join(p, sizeof(p), root, sub);
	if (r)
		return r;
	if (!is_dir(p))
		return 0;
	snprintf(data, sizeof(data), "size=%um,mode=%s", mb, extra);
	if (mount("ws-spec-tmp", p, "tmpfs", MS_NOSUID | MS_NODEV, data) < 0)
		return -errno;
	return 0;
}

/* /dev with only harmless character devices: no disks, no tty (TIOCSTI), no mem. */
static int mini_dev(const char *root, unsigned mb)
{
	static const struct { const char *name; unsigned maj, min; } nodes[] = {
		{ "null", 1, 3 }, { "zero", 1, 5 }, { "full", 1, 7 },
		{ "random", 1, 8 }, { "urandom", 1, 9 },
	};
	static const struct { const char *name, *target; } links[] = {
		{ "fd", "/proc/self/fd" }, { "stdin", "/proc/self/fd/0" },
		{ "stdout", "/proc/self/fd/1" }, { "stderr", "/proc/self/fd/2" },
	};
	char dev[PATH_MAX - 64], p[PATH_MAX];
	int r = path_join(dev, sizeof(dev), root, "/dev");
	if (r)
		return r;
	if (!is_dir(dev))
		return 0;
	char data[64];
	snprintf(data, sizeof(data), "size=%um,mode=755", mb);
	if (mount("ws-spec-dev", dev, "tmpfs", MS_NOSUID | MS_NOEXEC, data) < 0)
		return -errno;
	for (size_t i = 0; i < sizeof(nodes) / sizeof(nodes[0]); i++) {
		snprintf(p, sizeof(p), "%s/%s", dev, nodes[i].name);
		if (mknod(p, S_IFCHR | 0666, makedev(nodes[i].maj, nodes[i].min)) < 0)
			return -errno;
		chmod(p, 0666);  /* undo the umask */
	}
	for (size_t i = 0; i < sizeof(links) / sizeof(links[0]); i++) {
		snprintf(p, sizeof(p), "%s/%s", dev, links[i].name);
		if (symlink(links[i].target, p) < 0)
			return -errno;
	}
	snprintf(p, sizeof(p), "%s/shm", dev);
	if (mkdir(p, 01777) < 0)
		return -errno;
	return tmpfs_at(root, "/dev/shm", mb, "1777");
}

int sandbox_mounts(const struct spec_opts *o)
{
	char p[PATH_MAX];
	int r;

	/* Nothing we do here may propagate back to the host's mount namespace. */
	if (mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) < 0)
		return -errno;
	/* The whole tree read-only, without device nodes or setuid: the host's disks stay closed
	 * even to a root copy (read-only alone does not stop writes to device nodes). */
	struct mount_attr attr = { .attr_set = MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV };
	if (syscall(SYS_mount_setattr, AT_FDCWD, "/", AT_RECURSIVE, &attr, sizeof(attr)) < 0)
		return -errno;
	if ((r = mini_dev(o->root, o->tmpfs_mb)))
		return r;
	/* procfs of the copy's own pid namespace, read-only: no /proc/sys or sysrq writes. */
	if ((r = path_join(p, sizeof(p), o->root, "/proc")))
		return r;
	if (is_dir(p) && mount("proc", p, "proc", MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC, NULL) < 0)
		return -errno;
	if ((r = tmpfs_at(o->root, "/tmp", o->tmpfs_mb, "1777")) ||
	    (r = tmpfs_at(o->root, "/var/tmp", o->tmpfs_mb, "1777")))
		return r;
	if (strcmp(o->root, "/")) {
		if (chdir(o->root) < 0 || chroot(".") < 0)
			return -errno;
	}
	if (chdir(o->cwd ? o->cwd : "/") < 0 && chdir("/") < 0)
		return -errno;
	return 0;
}

/* Capabilities a read-mostly program may need as root: reading files it could read outside,
 * changing ownership of its own tmpfs files, switching uid. Nothing that reaches outside. */
static const int keep_caps[] = {
	CAP_CHOWN, CAP_DAC_OVERRIDE, CAP_DAC_READ_SEARCH, CAP_FOWNER, CAP_FSETID,
	CAP_SETGID, CAP_SETUID,
};

static int drop_caps(void)
{
	uint64_t keep = 0;
	for (size_t i = 0; i < sizeof(keep_caps) / sizeof(keep_caps[0]); i++)
		keep |= 1ULL << keep_caps[i];
	/* Bounding set first, so a later exec (root gets all caps) cannot regain the rest. */
	for (int c = 0; c <= CAP_LAST_CAP; c++)
		if (!(keep & (1ULL << c)) && prctl(PR_CAPBSET_DROP, c, 0, 0, 0) < 0 && errno != EINVAL)
			return -errno;
	struct __user_cap_header_struct h = { .version = _LINUX_CAPABILITY_VERSION_3, .pid = 0 };
	struct __user_cap_data_struct d[2];
	memset(d, 0, sizeof(d));
	for (int i = 0; i < 2; i++) {
		uint32_t part = (uint32_t)(keep >> (32 * i));
		d[i].effective = d[i].permitted = d[i].inheritable = part;
	}
	if (syscall(SYS_capset, &h, d) < 0)
		return -errno;
	if (prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0) < 0 && errno != EINVAL)
		return -errno;
	return 0;
}

int sandbox_restrict_process(const struct spec_opts *o)
{
	/* No controlling terminal: nothing to inject keystrokes into. */
	if (setsid() < 0)
		return -errno;
	/* Idle CPU: runs only when nothing else wants the CPU (paper §4.1.3). */
	struct sched_param sp = { .sched_priority = 0 };
	if (sched_setscheduler(0, SCHED_IDLE, &sp) < 0)
		return -errno;
	int prio = o->io_idle ? IOPRIO_PRIO_VALUE(IOPRIO_CLASS_IDLE, 0) : IOPRIO_PRIO_VALUE(IOPRIO_CLASS_BE, 7);
	if (syscall(SYS_ioprio_set, IOPRIO_WHO_PROCESS, 0, prio) < 0)
		return -errno;
	struct rlimit rl = { .rlim_cur = o->data_max, .rlim_max = o->data_max };
	if (setrlimit(RLIMIT_DATA, &rl) < 0)
		return -errno;
	rl.rlim_cur = rl.rlim_max = 0;
	if (setrlimit(RLIMIT_CORE, &rl) < 0)
		return -errno;
	if (drop_caps())
		return -errno;
	if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0)
		return -errno;
	return 0;
}
