/* When the released app waits on the disk, and on what (docs/replayer.md, "When the app
 * waited"): a process of its own (forked by the replayer, sharing this struct through an
 * anonymous shared mapping) samples the state of the app's tasks (its threads, and the processes
 * it starts) every APPWATCH_INTERVAL_NS from the release to its exit. Not a thread: with a
 * second thread, even one asleep throughout, the replayer's fetch ran slower (docs/replayer.md
 * has the measurements). A sample where a task is in
 * uninterruptible sleep (D: a page being read, a lock on one) and none is running counts as the
 * app waiting (the time since the previous look whole if that one saw it waiting too, else half,
 * and half of the next interval where it stopped); it is charged to the segment the replay was
 * submitting then, or to "after" once the replay is done (its last reads may still be in
 * flight). Each look also reads every task's run delay (/proc/PID/task/TID/schedstat: the time
 * it was runnable and waited for a CPU, since it started); the last value seen of each, summed,
 * is the time the app waited for a CPU (runq_ns: the replayer, the disk's own work and anything
 * else running beside it), the part of its launch that neither its CPU time nor its waits on the
 * disk account for. The app's CPU time (app_cpu_ns) is the most any look saw of it: its live
 * tasks' run times (schedstat's first field) and the CPU of the children its processes reaped
 * (cutime + cstime, in clock ticks); short of what it ran after the last look (docs/replayer.md
 * has how far short). Only with --pid: the pidfd's app. */
#ifndef APPWATCH_H
#define APPWATCH_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/types.h>

#define APPWATCH_INTERVAL_NS 2000000ull     /* 2 ms (longer if the looks' CPU is over 2 % of it) */
#define APPWATCH_FULL_NS (3ull * 1000000000) /* then every 10 ms */
#define APPWATCH_MAX_NS (20ull * 1000000000) /* a long-running app: stop sampling 20 s after the release */
#define APPWATCH_TASKS 64                   /* processes followed at most */
#define APPWATCH_WCHANS 4                   /* the kernel functions most waited in, kept */
#define APPWATCH_RUNQ_TASKS 256             /* tasks whose run delay is kept (the rest not counted) */

struct appwatch {
	uint32_t nsegs;
	/* written by the replay (atomically): the segment being fetched (0-based), nsegs once the
	 * replay is done; the release time (0: the app is still held, nothing is sampled) */
	int seg;
	uint64_t release_ns;
	bool stop;
	/* results (read after appwatch_stop) */
	uint64_t samples, waiting_samples, running_samples;
	uint64_t late_samples;               /* looks more than LATE intervals after the one before */
	uint64_t max_interval_ns;            /* the longest interval the cost rule set */
	uint64_t late_wait_ns;               /* what the cap left uncounted of late looks that saw a wait */
	uint64_t *waited_ns;                 /* [nsegs + 1]: per segment, and [nsegs] after the replay */
	uint64_t first_wait_ns, last_wait_ns; /* after the release; 0: never waited */
	uint32_t procs_seen;
	uint64_t cpu_ns;                     /* the sampling process's own CPU time */
	uint64_t runq_ns;                    /* the app's tasks' run delays summed (see above) */
	uint64_t app_cpu_ns;                 /* the app's CPU time, the most a look saw (see above) */
	bool capped;                         /* stopped at APPWATCH_MAX_NS, the app still running */
	uint32_t runq_tasks;                 /* tasks counted in it, at most APPWATCH_RUNQ_TASKS */
	bool runq_full;                      /* more tasks than that were seen: runq_ns is a lower bound */
	struct { char name[48]; uint32_t n; } wchan[APPWATCH_WCHANS];
	/* internal */
	pid_t child;                         /* the sampling process; 0: none running */
	pid_t procs[APPWATCH_TASKS];
	uint32_t nprocs;
	pid_t last_pid, pid_max;
	uint64_t last_scan_ns, other_wchan;
	struct { pid_t tid; uint64_t delay_ns; } runq[APPWATCH_RUNQ_TASKS];
};

/* Starts watching pid (the app, held at its exec): the watch, in a shared mapping, or NULL
 * (errno set). nsegs: the plan's segments. */
struct appwatch *appwatch_start(pid_t pid, uint32_t nsegs);
/* What the replay tells it. */
void appwatch_released(struct appwatch *w, uint64_t mono_ns);
void appwatch_segment(struct appwatch *w, int seg);
/* Stops the sampling process and waits for it (after the exit check); the results are then
 * final. Safe to call twice. */
void appwatch_stop(struct appwatch *w);
/* Stops it and unmaps the watch. NULL: nothing. */
void appwatch_free(struct appwatch *w);

/* Exposed for the C tests: is a /proc/PID/stat line in D state? running? (the state field
 * follows the last ')'). Returns the state character or 0. */
char appwatch_state(const char *stat_line);

/* The "app_wait" member of the stats JSON (without a leading comma). */
void appwatch_write(FILE *f, const struct appwatch *w);

#endif
