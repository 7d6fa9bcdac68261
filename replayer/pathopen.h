/* Opening a scheduled path without following a symlink in any of its components. */
#ifndef WARMSTART_PATHOPEN_H
#define WARMSTART_PATHOPEN_H

/* open(path, flags) for an absolute canonical path (no "." or ".." components: the .wsr reader
 * checks it), refusing a symlink anywhere in it with ELOOP: openat2 with RESOLVE_NO_SYMLINKS, or,
 * where the kernel has no openat2 (ENOSYS), path_open_walk. flags must not hold O_CREAT.
 * Returns the fd, or -1 with errno set. */
int path_open(const char *path, int flags);

/* The fallback, a component walk from "/": each directory opened O_PATH|O_DIRECTORY|O_NOFOLLOW
 * from the one before, the last component with O_NOFOLLOW. A symlink gives ELOOP as openat2
 * does. Exposed for the test. */
int path_open_walk(const char *path, int flags);

#endif
