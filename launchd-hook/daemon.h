/* Shared pieces of warmstartd: options, logging, the watchdog heartbeat. */
#ifndef WS_DAEMON_H
#define WS_DAEMON_H

#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/types.h>

#define WS_MAX_MARKS 64
/* how long a hooked launch's replayer waits for the app's exit to take its verdict (seconds) */
#define WS_JUDGE_WAIT_S "60"

struct ws_options {
	const char *index_path;
	const char *replayer;
	const char *events_path; /* JSON lines: launches and stale marks, read by `warmstart hook` */
	const char *stats_path;  /* decision-time statistics, rewritten on SIGUSR1 and exit */
	const char *pidfile;
	const char *marks[WS_MAX_MARKS]; /* extra paths whose mounts are marked (learning) */
	int n_marks;
	const char *launch_dir;  /* per hooked launch: the replayer's stats JSON is written here */
	const char *learner;     /* unix socket of `warmstart hook learner` (learn = auto) */
	const char *learn_prefixes[WS_MAX_MARKS]; /* unknown executables under these are learned */
	int n_learn_prefixes;
	int watchdog;
	unsigned stop_check_ms;  /* watchdog period */
	unsigned hang_ms;        /* heartbeat age that counts as hung */
};

/* Written by the worker, read by the watchdog (MAP_SHARED, set up before fork). */
struct ws_heartbeat {
	volatile uint64_t beat_ns;
	volatile uint32_t held;
	volatile int32_t worker_pid;
};

uint64_t ws_now_ns(void);
void ws_log(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* A file of the daemon's opened for writing (flags: O_TRUNC or O_APPEND), created with `mode`
 * and given exactly that mode: never through a symlink (O_NOFOLLOW) and only a regular file
 * (EINVAL otherwise), so neither the open nor the fchmod acts on a file named by a link. */
FILE *ws_open_write(const char *path, int flags, mode_t mode);
/* The signals the watchdog and the worker read from a signalfd (TERM, INT, HUP, USR1, CHLD):
 * blocked from the start, so an early SIGUSR1 does not kill the daemon. */
void ws_handled_signals(sigset_t *set);

/* The fanotify event loop; returns the process exit status. */
int ws_worker_run(const struct ws_options *opt, struct ws_heartbeat *hb);

/* Start the replayer for one launch; *notify_fd becomes readable when the pre-buffer is in
 * (a byte) or the replayer is gone (EOF). Returns the child's pid or -errno. */
pid_t ws_spawn_replayer(const char *replayer, const char *schedule, uid_t uid, gid_t gid,
			pid_t app_pid, const char *stats_path, int *notify_fd);

#endif
