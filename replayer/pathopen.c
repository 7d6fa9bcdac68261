/* A scheduled path is opened without following symlinks in ANY component, not only the last one:
 * a directory of the user's swapped for a symlink would otherwise lead a root replayer's open
 * into a root-only directory (an open alone acts on some devices, before any identity check). */
#include "pathopen.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/openat2.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#ifndef __NR_openat2
#define __NR_openat2 437
#endif

/* After ENOTDIR from an O_DIRECTORY|O_NOFOLLOW open of name: ELOOP if it is a symlink. */
static int symlink_errno(int dirfd, const char *name, int err)
{
	struct stat st;
	if (err == ENOTDIR && fstatat(dirfd, name, &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISLNK(st.st_mode))
		return ELOOP;
	return err;
}

int path_open_walk(const char *path, int flags)
{
	char name[4096];
	if (path[0] != '/') {
		errno = EINVAL;
		return -1;
	}
	int dir = open("/", O_PATH | O_DIRECTORY | O_CLOEXEC);
	const char *p = path;
	while (dir >= 0) {
		while (*p == '/')
			p++;
		const char *end = strchrnul(p, '/');
		size_t len = (size_t)(end - p);
		if (len == 0 || len >= sizeof(name)) {   /* "/" or a trailing slash: not a file path */
			close(dir);
			errno = len ? ENAMETOOLONG : EISDIR;
			return -1;
		}
		memcpy(name, p, len);
		name[len] = '\0';
		const char *rest = end;
		while (*rest == '/')
			rest++;
		int last = *rest == '\0';
		int fd = last ? openat(dir, name, flags | O_NOFOLLOW)
			      : openat(dir, name, O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
		int err = errno;
		if (fd < 0 && !last)
			err = symlink_errno(dir, name, err);
		close(dir);
		if (last || fd < 0) {
			errno = err;
			return fd;
		}
		dir = fd;
		p = rest;
	}
	return -1;
}

int path_open(const char *path, int flags)
{
	struct open_how how = { .flags = (unsigned long long)(unsigned)flags, .resolve = RESOLVE_NO_SYMLINKS };
	long fd = syscall(__NR_openat2, AT_FDCWD, path, &how, sizeof(how));
	if (fd >= 0 || errno != ENOSYS)
		return (int)fd;
	return path_open_walk(path, flags);
}
