/* The one place the replayer opens a scheduled path: a file, or a directory on its path. */
#ifndef OPENPATH_H
#define OPENPATH_H

/* open(2) of a NUL-terminated absolute path with `flags`; returns the fd or -1 with errno. */
int replay_open_path(const char *path, int flags);

#endif
