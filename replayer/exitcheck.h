/* The verdict of a hooked launch is taken at its exit (docs/hook.md, "Accuracy feedback"):
 * after the replay, wait for the app to exit, then measure what its launch left in the page
 * cache. Measured later, a cache dropped or evicted after the launch reads as a bad schedule. */
#ifndef EXITCHECK_H
#define EXITCHECK_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/types.h>

#include "wsr_format.h"

struct exit_check {
	bool asked, exited;          /* asked: a pid to wait for; exited: within the wait */
	double t_exit_s;             /* CLOCK_MONOTONIC (the daemon's clock) at the exit, or at the
				      * end of the wait if the app still runs; seconds */
	uint64_t scheduled_resident; /* bytes of the scheduled ranges in the cache at the exit */
	uint64_t missed;             /* bytes of the scheduled files in the cache outside them,
				      * less what was there when the replay first opened the file */
	uint64_t outside_at_open;    /* what was so subtracted */
	uint64_t recently_evicted;   /* pages of the scheduled ranges evicted during the launch */
	bool evicted_known;          /* cachestat answered (mincore cannot tell evictions) */
	uint32_t files_checked;
};

/* A pidfd for the app, taken at start while the exec is held (no pid reuse possible then);
 * -1 if there is none to wait for. */
int exit_check_open(pid_t pid);

/* Wait up to wait_s for the app behind pidfd to exit, then measure (also when it still runs
 * then: a long-lived app). Closes pidfd. outside_at_open: replay_stats' (or NULL). */
void exit_check_run(int pidfd, const struct wsr_schedule *s, const uint64_t *outside_at_open, unsigned wait_s,
		    struct exit_check *x);

/* The "exit" member of the stats JSON (without a leading comma). */
void exit_check_write(FILE *f, const struct exit_check *x);

#endif
