/* ws-spec-run: run a speculative copy of a command in a sandbox and turn its file opens into
 * prefetches. See docs/speculation.md. Functions return 0 or -errno. */
#ifndef WS_SPEC_H
#define WS_SPEC_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

struct spec_opts {
	const char *root;          /* chroot of the copy ("/" = none) */
	const char *cwd;           /* working directory inside root */
	const char *copy_output;   /* file (host side) for the copy's stdout+stderr, NULL = /dev/null */
	uint64_t ra_max;           /* per-file readahead cap, bytes */
	uint64_t budget;           /* total prefetch budget, bytes */
	uint64_t data_max;         /* RLIMIT_DATA of the copy, bytes */
	unsigned tmpfs_mb;         /* size of each tmpfs the copy may write to */
	int workers;               /* prefetch threads */
	int notify;                /* 1: trace opens (seccomp user notification) and prefetch */
	int io_idle;               /* 1: IOPRIO_CLASS_IDLE for the copy, else best-effort level 7 */
	char **argv;               /* the command */
	char **envp;               /* its environment */
};

/* sandbox.c: namespaces are made by the caller (clone); this builds the mount tree. */
int sandbox_mounts(const struct spec_opts *o);
/* sandbox.c: in the copy, just before exec: caps, priorities, limits, session. */
int sandbox_restrict_process(const struct spec_opts *o);

/* filter.c: install the seccomp filter; *listener gets the notification fd (or -1). */
int filter_install(int notify, int *listener);
/* filter.c: the stacked second filter (sendmsg refused), after the listener was passed. */
int filter_seal(void);

/* notify.c: serve notifications until the copy (pid ns init `init_pid`) ends; prints events. */
int notify_serve(int listener, pid_t init_pid, const struct spec_opts *o);

/* fdpass.c */
int fd_send(int sock, int fd);
int fd_recv(int sock, int *fd);

#endif
