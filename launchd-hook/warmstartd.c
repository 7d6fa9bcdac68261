/* warmstartd: prefetch a recorded app's pre-buffer before its exec proceeds.
 *
 * Two processes, and a sentinel. The worker (worker.c) owns the fanotify group and answers exec events. The
 * watchdog (this file, the parent) owns no fanotify fd, so the kernel releases the group, and
 * with it every pending exec (answered FAN_ALLOW), the moment the worker dies. The kernel has
 * no timeout for permission events: a STOPPED listener blocks execs for ever. So the watchdog
 * SIGKILLs a worker it finds stopped (state T/t) or whose heartbeat is older than --hang-ms,
 * then starts a new one. The worker dies with the watchdog (PR_SET_PDEATHSIG). A third process,
 * the sentinel, covers the watchdog being stopped too (start_sentinel). */
#include "daemon.h"

#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static void usage(FILE *f)
{
	fprintf(f,
		"usage: warmstartd [options]\n"
		"  --index PATH       hook index written by `warmstart hook install` (default /var/lib/warmstart/hook.idx)\n"
		"  --replayer PATH    warmstart-replay binary (default: next to warmstartd)\n"
		"  --events PATH      append launch/stale records (JSON lines)\n"
		"  --stats PATH       decision-time statistics (written on SIGUSR1 and exit)\n"
		"  --pidfile PATH     write the watchdog's pid\n"
		"  --mark PATH        also mark the mount holding PATH (repeatable)\n"
		"  --launch-dir DIR   the replayer of each hooked launch writes its stats JSON here\n"
		"  --learner SOCK     ask `warmstart hook learner` (unix socket) to record unknown apps\n"
		"  --learn-prefix P   ... whose executable path starts with P (repeatable; with --mark)\n"
		"  --no-watchdog      run the worker alone (a SIGSTOPped worker then blocks execs on marked mounts)\n"
		"  --stop-check-ms N  watchdog period (default 50)\n"
		"  --hang-ms N        heartbeat age counted as a hang (default 2000)\n"
		"examples:\n"
		"  warmstartd --index /var/lib/warmstart/hook.idx --events /var/lib/warmstart/hook-events.jsonl\n"
		"  kill -USR1 $(cat /run/warmstart/warmstartd.pid)   # refresh the --stats file\n");
}

/* /proc/PID/NAME into buf, NUL-terminated ("" if unreadable). */
static void read_proc(pid_t pid, const char *name, char *buf, size_t size)
{
	char path[64];
	ssize_t n = -1;
	int fd;

	snprintf(path, sizeof(path), "/proc/%d/%s", (int)pid, name);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd >= 0) {
		n = read(fd, buf, size - 1);
		close(fd);
	}
	buf[n > 0 ? n : 0] = '\0';
}

static char worker_state(pid_t pid)
{
	char buf[512], *p;

	read_proc(pid, "stat", buf, sizeof(buf));
	p = strrchr(buf, ')'); /* comm may contain spaces and parentheses */
	return p && p[1] == ' ' ? p[2] : '?';
}

/* Where a hung worker is, for the log: its state, the system call it is in, and the kernel
 * functions it waits in ("a < b < c", innermost first; root reads /proc/PID/stack). A task on a
 * CPU has no stack to read (an idle worker just woken from its poll): it is looked at again, up
 * to 10 times 1 ms apart; one never found waiting in the kernel is "not in the kernel" (running
 * its own code: a hang in warmstartd, not in a system call). */
static void where_stuck(pid_t pid, char *out, size_t size)
{
	char sys[256], stack[2048], *line, *save = NULL;
	size_t len;
	int frames = 0;

	for (int look = 0; look < 10; look++) {
		if (look)
			usleep(1000);
		read_proc(pid, "stack", stack, sizeof(stack));
		read_proc(pid, "syscall", sys, sizeof(sys));
		if (strchr(stack, ' '))
			break;
	}
	sys[strcspn(sys, " \n")] = '\0';
	len = (size_t)snprintf(out, size, "state %c, syscall %s, kernel stack:", worker_state(pid),
			       sys[0] ? sys : "?");
	for (line = strtok_r(stack, "\n", &save); line && frames < 8 && len < size;
	     line = strtok_r(NULL, "\n", &save)) {
		char *fn = strchr(line, ' '); /* "[<0>] func+0x1f/0x30" */

		if (!fn)
			continue;
		fn[strcspn(fn, "+")] = '\0';
		len += (size_t)snprintf(out + len, size - len, "%s%s", frames++ ? " <" : "", fn);
	}
	if (!frames && len < size)
		snprintf(out + len, size - len, " none (not in the kernel)");
}

static pid_t start_worker(const struct ws_options *opt, struct ws_heartbeat *hb, pid_t watchdog)
{
	pid_t pid = fork();

	if (pid != 0)
		return pid < 0 ? -errno : pid;
	prctl(PR_SET_PDEATHSIG, SIGKILL);
	if (getppid() != watchdog)
		_exit(1); /* the watchdog died before prctl */
	prctl(PR_SET_NAME, "warmstartd-wk");
	_exit(ws_worker_run(opt, hb));
}

static int stopped(pid_t pid)
{
	char st = worker_state(pid);

	return st == 'T' || st == 't';
}

/* The sentinel: a third process, in a session of its own (so `kill -STOP -PGID` of the daemon
 * does not reach it), holding no fanotify fd. While the watchdog runs it does nothing: the
 * watchdog looks after the worker. When the watchdog is stopped too and the worker is stopped
 * or hung, it kills the worker: the kernel then allows every exec the group held, and the
 * watchdog, once continued, starts a new worker. Dies with the watchdog. */
static pid_t start_sentinel(const struct ws_options *opt, struct ws_heartbeat *hb, pid_t watchdog)
{
	pid_t pid = fork();

	if (pid != 0)
		return pid < 0 ? -errno : pid;
	prctl(PR_SET_PDEATHSIG, SIGKILL);
	if (getppid() != watchdog)
		_exit(0);
	setsid();
	prctl(PR_SET_NAME, "warmstartd-sn");
	for (;;) {
		pid_t worker;

		usleep(opt->stop_check_ms * 1000u);
		if (getppid() != watchdog)
			_exit(0);
		worker = hb->worker_pid;
		if (worker <= 0 || !stopped(watchdog))
			continue;
		if (stopped(worker) || ws_now_ns() - hb->beat_ns > (uint64_t)opt->hang_ms * 1000000ull) {
			ws_log("watchdog %d and worker %d are both stopped or hung; killing the worker so "
			       "execs proceed (the watchdog starts a new one when it runs again)",
			       (int)watchdog, (int)worker);
			kill(worker, SIGKILL);
			hb->worker_pid = 0;
		}
	}
}

/* The watchdog's state: its worker, the signals it reads, its restarts in the current minute. */
struct watchdog {
	const struct ws_options *opt;
	struct ws_heartbeat *hb;
	pid_t me, worker, killed; /* killed: the worker SIGKILLed for a missed heartbeat */
	int sfd, stopping, restarts;
	uint64_t window_start;
};

/* SIGTERM/SIGINT: stop the worker (continued first, should it be stopped); SIGHUP and SIGUSR1
 * are the worker's to act on. */
static void forward_signals(struct watchdog *w)
{
	struct signalfd_siginfo si;

	while (read(w->sfd, &si, sizeof(si)) == sizeof(si)) {
		if (si.ssi_signo == SIGTERM || si.ssi_signo == SIGINT) {
			w->stopping = 1;
			kill(w->worker, SIGTERM);
			kill(w->worker, SIGCONT);
		} else if (si.ssi_signo == SIGHUP || si.ssi_signo == SIGUSR1) {
			kill(w->worker, (int)si.ssi_signo);
		}
	}
}

/* The worker ended with status: start a new one (-1: go on watching) unless the daemon is
 * stopping (0) or the worker cannot run: it could not start, or it restarted 5 times in a
 * minute (1; execs are unaffected). */
static int worker_ended(struct watchdog *w, int status)
{
	if (w->stopping)
		return 0;
	if (WIFEXITED(status) && WEXITSTATUS(status) == 1 && w->hb->worker_pid == 0) {
		ws_log("worker could not start; giving up (execs are unaffected)");
		return 1;
	}
	ws_log("worker %d ended (%s %d); restarting", (int)w->worker,
	       WIFSIGNALED(status) ? "signal" : "status",
	       WIFSIGNALED(status) ? WTERMSIG(status) : WEXITSTATUS(status));
	if (ws_now_ns() - w->window_start > 60000000000ull) {
		w->window_start = ws_now_ns();
		w->restarts = 0;
	}
	if (++w->restarts > 5) {
		ws_log("worker restarted 5 times in a minute; giving up (execs are unaffected)");
		return 1;
	}
	usleep(200000);
	w->hb->worker_pid = 0;
	w->hb->held = 0;
	w->hb->beat_ns = ws_now_ns();
	w->worker = start_worker(w->opt, w->hb, w->me);
	return w->worker < 0 ? 1 : -1;
}

/* A stopped or hung listener blocks every exec on the marked mounts: kill it, which makes the
 * kernel allow whatever it held; worker_ended then starts over. */
static void kill_if_stuck(struct watchdog *w)
{
	if (stopped(w->worker)) {
		ws_log("worker %d is stopped; killing it so execs proceed", (int)w->worker);
		kill(w->worker, SIGKILL);
	} else if (ws_now_ns() - w->hb->beat_ns > (uint64_t)w->opt->hang_ms * 1000000ull) {
		char where[512];

		if (w->killed == w->worker)
			return; /* SIGKILLed already: it ends when it leaves the kernel */
		where_stuck(w->worker, where, sizeof(where));
		ws_log("worker %d missed its heartbeat for %u ms (%s); killing it", (int)w->worker,
		       w->opt->hang_ms, where);
		kill(w->worker, SIGKILL);
		w->killed = w->worker;
	}
}

static int run_watchdog(const struct ws_options *opt, struct ws_heartbeat *hb)
{
	struct watchdog w = {.opt = opt, .hb = hb, .me = getpid(), .window_start = ws_now_ns()};
	sigset_t set;
	int rc = -1;

	ws_handled_signals(&set);
	sigprocmask(SIG_BLOCK, &set, NULL);
	w.sfd = signalfd(-1, &set, SFD_CLOEXEC | SFD_NONBLOCK);
	if (w.sfd < 0) {
		ws_log("signalfd: %s", strerror(errno));
		return 1;
	}
	hb->beat_ns = ws_now_ns();
	if (start_sentinel(opt, hb, w.me) < 0)
		ws_log("cannot start the sentinel: %s (execs wait if both processes are stopped)",
		       strerror(errno));
	w.worker = start_worker(opt, hb, w.me);
	if (w.worker < 0) {
		ws_log("fork: %s", strerror((int)-w.worker));
		close(w.sfd);
		return 1;
	}
	while (rc < 0) {
		struct pollfd p = {w.sfd, POLLIN, 0};
		int status;

		poll(&p, 1, (int)opt->stop_check_ms);
		forward_signals(&w);
		if (waitpid(w.worker, &status, WNOHANG) == w.worker)
			rc = worker_ended(&w, status);
		else if (!w.stopping)
			kill_if_stuck(&w);
	}
	close(w.sfd);
	return rc;
}

static char *default_replayer(const char *argv0)
{
	char self[4096], *slash, *out;
	ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);

	(void)argv0;
	if (n <= 0)
		return strdup("/usr/libexec/warmstart/warmstart-replay");
	self[n] = '\0';
	slash = strrchr(self, '/');
	if (slash)
		*slash = '\0';
	if (asprintf(&out, "%s/warmstart-replay", self) < 0)
		return NULL;
	return out;
}

/* argv into *opt: -1 to go on, else the exit status (0 after --help, 2 after a bad option). */
static int parse_options(int argc, char **argv, struct ws_options *opt)
{
	static const struct option longopts[] = {
		{"index", required_argument, 0, 'i'},   {"replayer", required_argument, 0, 'r'},
		{"events", required_argument, 0, 'e'},  {"stats", required_argument, 0, 's'},
		{"pidfile", required_argument, 0, 'p'}, {"mark", required_argument, 0, 'm'},
		{"no-watchdog", no_argument, 0, 'W'},   {"stop-check-ms", required_argument, 0, 'c'},
		{"hang-ms", required_argument, 0, 'H'}, {"help", no_argument, 0, 'h'},
		{"launch-dir", required_argument, 0, 'L'}, {"learner", required_argument, 0, 'l'},
		{"learn-prefix", required_argument, 0, 'P'},
		{0, 0, 0, 0}};
	int c;

	while ((c = getopt_long(argc, argv, "h", longopts, NULL)) != -1) {
		switch (c) {
		case 'i': opt->index_path = optarg; break;
		case 'r': opt->replayer = optarg; break;
		case 'e': opt->events_path = optarg; break;
		case 's': opt->stats_path = optarg; break;
		case 'p': opt->pidfile = optarg; break;
		case 'm':
			if (opt->n_marks == WS_MAX_MARKS) {
				fprintf(stderr, "warmstartd: at most %d --mark paths\n", WS_MAX_MARKS);
				return 2;
			}
			opt->marks[opt->n_marks++] = optarg;
			break;
		case 'W': opt->watchdog = 0; break;
		case 'L': opt->launch_dir = optarg; break;
		case 'l': opt->learner = optarg; break;
		case 'P':
			if (opt->n_learn_prefixes == WS_MAX_MARKS) {
				fprintf(stderr, "warmstartd: at most %d --learn-prefix\n", WS_MAX_MARKS);
				return 2;
			}
			opt->learn_prefixes[opt->n_learn_prefixes++] = optarg;
			break;
		case 'c': opt->stop_check_ms = (unsigned)strtoul(optarg, NULL, 10); break;
		case 'H': opt->hang_ms = (unsigned)strtoul(optarg, NULL, 10); break;
		case 'h': usage(stdout); return 0;
		default: usage(stderr); return 2;
		}
	}
	if (optind != argc || opt->stop_check_ms == 0 || opt->hang_ms == 0) {
		usage(stderr);
		return 2;
	}
	return -1;
}

static int write_pidfile(const char *path)
{
	FILE *f = ws_open_write(path, O_TRUNC, 0644);

	if (!f || fprintf(f, "%d\n", (int)getpid()) < 0 || fclose(f) != 0) {
		fprintf(stderr, "warmstartd: cannot write pidfile %s: %s\n", path, strerror(errno));
		return -1;
	}
	return 0;
}

int main(int argc, char **argv)
{
	struct ws_options opt = {.index_path = "/var/lib/warmstart/hook.idx", .watchdog = 1,
				 .stop_check_ms = 50, .hang_ms = 2000};
	struct ws_heartbeat *hb;
	char *replayer_default = NULL;
	sigset_t handled;
	int rc;

	/* block (signalfd-handled) signals first: an early SIGUSR1 must not kill us */
	ws_handled_signals(&handled);
	sigprocmask(SIG_BLOCK, &handled, NULL);
	rc = parse_options(argc, argv, &opt);
	if (rc >= 0)
		return rc;
	if (!opt.replayer) {
		replayer_default = default_replayer(argv[0]);
		opt.replayer = replayer_default;
	}
	if (opt.pidfile && write_pidfile(opt.pidfile) < 0)
		return 1;
	hb = mmap(NULL, sizeof(*hb), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	if (hb == MAP_FAILED) {
		perror("warmstartd: mmap");
		return 1;
	}
	rc = opt.watchdog ? run_watchdog(&opt, hb) : ws_worker_run(&opt, hb);
	if (opt.pidfile)
		unlink(opt.pidfile);
	munmap(hb, sizeof(*hb));
	free(replayer_default);
	return rc;
}
