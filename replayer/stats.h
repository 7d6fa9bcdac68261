/* The replayer's report: one JSON object written to a file or fd at exit. */
#ifndef STATS_H
#define STATS_H

#include <stdio.h>

#include "appwatch.h"
#include "engine.h"
#include "exitcheck.h"
#include "replay.h"

struct run_info {
	const char *status;      /* ok | refused | error */
	const char *error;       /* NULL or the message */
	const char *mode, *engine, *ioprio;
	unsigned long long schedule_id;
	unsigned depth;
	const struct exit_check *exit; /* --judge-at-exit: the app's exit and residency there */
	const struct appwatch *watch;  /* --pid: when the released app waited on the disk */
};

void stats_write(FILE *f, const struct run_info *ri, const struct replay_stats *st,
		 const struct engine *e);

#endif
