/* Engine selection by name. */
#include "engine.h"

#include <errno.h>
#include <string.h>

int engine_init(struct engine *e, const char *name, unsigned depth)
{
	memset(e, 0, sizeof(*e));
	if (!strcmp(name, "readahead"))
		return engine_ra_init(e, false);
	if (!strcmp(name, "fadvise"))
		return engine_ra_init(e, true);
	if (!strcmp(name, "pread"))
		return engine_pread_init(e, depth ? depth : 4);
	if (!strcmp(name, "uring"))
		return engine_uring_init(e, depth ? depth : 16);
	return -EINVAL;
}
