/* Opening a scheduled path (see openpath.h). The schedule's paths name the files themselves
 * (found by walking directories, recorder/resolve.py); callers pass O_NOFOLLOW so a symlink put in
 * the last component's place is never followed. Kept in one function so a stricter resolution
 * (openat2 RESOLVE_NO_SYMLINKS for every component) changes one place. */
#include "openpath.h"

#include <fcntl.h>

int replay_open_path(const char *path, int flags)
{
	return open(path, flags);
}
