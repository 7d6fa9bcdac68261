/* warmstart-replay: prefetch an application's launch schedule into the page cache.
 * Parses options, loads the schedule, drops privileges, runs the replay, writes stats.
 * See docs/replayer.md for the protocol (notify fd, stats JSON, exit codes). */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <grp.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "engine.h"
#include "replay.h"
#include "stats.h"
#include "wsr_format.h"

#define EXIT_USAGE 2
#define EXIT_REFUSED 3

#define IOPRIO_CLASS_SHIFT 13
#define IOPRIO_WHO_PROCESS 1

static const char usage[] =
"usage: warmstart-replay [options] SCHEDULE.wsr\n"
"  --mode segmented|reorder|interleave   default segmented\n"
"  --engine readahead|fadvise|pread|uring  default readahead\n"
"  --depth N            pread threads / io_uring entries (default 4 / 16)\n"
"  --notify-fd FD       write \"start\\n\" before the first read, \"ready\\n\" and close FD\n"
"                       when the app may start\n"
"                       (EOF without \"ready\" also means: start it, unprefetched)\n"
"  --stats-fd FD | --stats FILE   write the JSON report there at exit\n"
"  --pid PID            the app, for --judge-at-exit\n"
"  --reserve-mb N       leave N MiB of MemAvailable untouched (default 128)\n"
"  --psi-limit PCT      stop prefetching at PSI memory some avg10 >= PCT (default 10, 0 = off)\n"
"  --ioprio be|idle|none   I/O class of the fetch (default be: idle causes priority\n"
"                       inversion when the app waits on a page idle I/O is reading)\n"
"  --uid UID --gid GID  drop to this user before opening any scheduled file\n"
"  --no-wait            release without checking that the pre-buffer is resident\n"
"  --judge-at-exit S    with --pid: after the replay, wait up to S seconds for the app's exit\n"
"                       and report the scheduled files' residency there (hook feedback)\n"
"exit: 0 done, 1 error, 2 usage, 3 schedule refused (corrupt/foreign; the app runs normally)\n";

static int set_ioprio(const char *cls)
{
	int c;
	if (!strcmp(cls, "none"))
		return 0;
	if (!strcmp(cls, "idle"))
		c = 3;
	else if (!strcmp(cls, "be"))
		c = 2;
	else
		return -EINVAL;
	int value = (c << IOPRIO_CLASS_SHIFT) | (c == 2 ? 7 : 0);
	return syscall(SYS_ioprio_set, IOPRIO_WHO_PROCESS, 0, value) < 0 ? -errno : 0;
}

static int drop_privileges(long uid, long gid)
{
	/* Groups first, then gid, then uid: after setuid we could not change the others. */
	if (gid >= 0 && (setgroups(0, NULL) < 0 || setgid((gid_t)gid) < 0))
		return -errno;
	if (uid >= 0 && setuid((uid_t)uid) < 0)
		return -errno;
	return 0;
}

static long num(const char *s, long min, long max)
{
	char *end;
	errno = 0;
	long v = strtol(s, &end, 10);
	if (errno || *end || end == s || v < min || v > max) {
		fprintf(stderr, "warmstart-replay: bad number '%s'\n%s", s, usage);
		exit(EXIT_USAGE);
	}
	return v;
}

static void close_notify(int fd)
{
	if (fd >= 0)
		close(fd);   /* EOF tells the waiter to start the app without us */
}

/* Set up, about to read: a holder counts the hold from here (docs/replayer.md, notify fd), so a
 * start-up slowed by a busy CPU does not use up a short hold before the first read. */
static void announce_start(int fd)
{
	if (fd >= 0) {
		ssize_t w = write(fd, "start\n", 6);
		(void)w;   /* the holder may be gone; the fetch goes on */
	}
}

/* Everything the command line says; ri carries the names into the report. */
struct cli {
	struct replay_opts o;
	struct run_info ri;
	const char *schedule, *stats_path;
	int stats_fd;
	long uid, gid;
	pid_t app_pid;
	unsigned judge_wait_s;
};

__attribute__((format(printf, 2, 3)))
static int usage_error(const struct cli *c, const char *fmt, ...)
{
	va_list ap;
	fputs("warmstart-replay: ", stderr);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fprintf(stderr, "\n%s", usage);
	close_notify(c->o.notify_fd);
	return EXIT_USAGE;
}

/* Fills *c from argv. Returns -1 to go on, or the exit code (help, or a usage error: a bad
 * option fails fast, before anything runs). */
static int parse_options(int argc, char **argv, struct cli *c)
{
	static const struct option opts[] = {
		{ "mode", required_argument, 0, 'm' }, { "engine", required_argument, 0, 'e' },
		{ "depth", required_argument, 0, 'd' }, { "notify-fd", required_argument, 0, 'n' },
		{ "stats-fd", required_argument, 0, 'S' }, { "stats", required_argument, 0, 's' },
		{ "pid", required_argument, 0, 'p' }, { "reserve-mb", required_argument, 0, 'r' },
		{ "psi-limit", required_argument, 0, 'P' }, { "ioprio", required_argument, 0, 'i' },
		{ "uid", required_argument, 0, 'u' }, { "gid", required_argument, 0, 'g' },
		{ "no-wait", no_argument, 0, 'W' }, { "judge-at-exit", required_argument, 0, 'J' },
		{ "help", no_argument, 0, 'h' }, { 0, 0, 0, 0 } };

	for (int ch; (ch = getopt_long(argc, argv, "h", opts, NULL)) != -1;) {
		switch (ch) {
		case 'm':
			c->ri.mode = optarg;
			if (!strcmp(optarg, "segmented"))
				c->o.mode = MODE_SEGMENTED;
			else if (!strcmp(optarg, "reorder"))
				c->o.mode = MODE_REORDER;
			else if (!strcmp(optarg, "interleave"))
				c->o.mode = MODE_INTERLEAVE;
			else {
				fprintf(stderr, "warmstart-replay: unknown mode '%s'\n%s", optarg, usage);
				return EXIT_USAGE;
			}
			break;
		case 'e': c->ri.engine = optarg; break;
		case 'd': c->ri.depth = (unsigned)num(optarg, 1, 256); break;
		case 'n': c->o.notify_fd = (int)num(optarg, 0, 1 << 20); break;
		case 'S': c->stats_fd = (int)num(optarg, 0, 1 << 20); break;
		case 's': c->stats_path = optarg; break;
		case 'J': c->judge_wait_s = (unsigned)num(optarg, 1, 86400); break;
		case 'p': c->app_pid = (pid_t)num(optarg, 1, 1 << 30); break;
		case 'r': c->o.reserve_bytes = (uint64_t)num(optarg, 0, 1l << 30) << 20; break;
		case 'P': c->o.psi_limit = (double)num(optarg, 0, 100); break;
		case 'i': c->ri.ioprio = optarg; break;
		case 'u': c->uid = num(optarg, 0, 1l << 31); break;
		case 'g': c->gid = num(optarg, 0, 1l << 31); break;
		case 'W': c->o.wait_resident = false; break;
		case 'h': fputs(usage, stdout); return 0;
		default: fputs(usage, stderr); return EXIT_USAGE;
		}
	}
	if (optind != argc - 1) {
		fputs(usage, stderr);
		close_notify(c->o.notify_fd);
		return EXIT_USAGE;
	}
	c->schedule = argv[optind];
	if (strcmp(c->ri.engine, "readahead") && strcmp(c->ri.engine, "fadvise") &&
	    strcmp(c->ri.engine, "pread") && strcmp(c->ri.engine, "uring"))
		return usage_error(c, "unknown engine '%s'", c->ri.engine);
	if (!c->app_pid != !c->judge_wait_s)
		return usage_error(c, "--pid and --judge-at-exit go together");
	c->o.measure_at_open = c->judge_wait_s != 0;
	return -1;
}

/* The report's stream (--stats FILE or --stats-fd FD), or NULL: a report we cannot write does
 * not stop the prefetch. Opened before the uid drop (warmstartd's launch dir is root's): never
 * through a symlink. */
static FILE *open_stats(struct cli *c)
{
	if (c->stats_path) {
		c->stats_fd = open(c->stats_path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0600);
		if (c->stats_fd < 0)
			fprintf(stderr, "warmstart-replay: cannot write stats to %s: %s\n",
				c->stats_path, strerror(errno));
	}
	return c->stats_fd >= 0 ? fdopen(c->stats_fd, "w") : NULL;
}

/* A failure before the fetch: say so, let the app start unprefetched, report it as `status`.
 * msg must outlive the report. */
static int fail(struct cli *c, const char *status, const char *msg, int ex)
{
	fprintf(stderr, "warmstart-replay: %s\n", msg);
	close_notify(c->o.notify_fd);
	c->ri.status = status;
	c->ri.error = msg;
	return ex;
}

/* Load the schedule, drop privileges, set the I/O class, set up the engine. Returns 0, or the
 * exit code (EXIT_USAGE for a bad --ioprio: nothing to report then). */
static int prepare(struct cli *c, struct wsr_schedule *s, struct engine *e)
{
	static char msg[512];
	const char *why = NULL;
	int rc = wsr_load(c->schedule, s, &why);
	if (rc) {
		snprintf(msg, sizeof(msg), "schedule %s refused: %s; the app starts without prefetch "
			 "(re-run `warmstart analyze` to rebuild it)", c->schedule, why ? why : strerror(-rc));
		return fail(c, "refused", msg, EXIT_REFUSED);
	}
	c->ri.schedule_id = s->schedule_id;
	rc = drop_privileges(c->uid, c->gid);
	if (!rc && (rc = set_ioprio(c->ri.ioprio)) == -EINVAL) {
		fprintf(stderr, "warmstart-replay: unknown ioprio '%s'\n%s", c->ri.ioprio, usage);
		close_notify(c->o.notify_fd);
		return EXIT_USAGE;
	}
	if (rc) {
		snprintf(msg, sizeof(msg), "cannot drop privileges / set I/O priority: %s "
			 "(--uid/--gid need root)", strerror(-rc));
		return fail(c, "error", msg, 1);
	}
	rc = engine_init(e, c->ri.engine, c->ri.depth);
	if (rc) {
		snprintf(msg, sizeof(msg), "cannot set up engine %s: %s; try --engine readahead",
			 c->ri.engine, strerror(-rc));
		return fail(c, "error", msg, 1);
	}
	c->ri.depth = e->depth;
	return 0;
}

int main(int argc, char **argv)
{
	struct replay_stats st = { .start_mono_ns = mono_ns() };
	struct cli c = {
		.o = { .mode = MODE_SEGMENTED, .notify_fd = -1, .reserve_bytes = 128ull << 20,
		       .psi_limit = 10.0, .wait_resident = true },
		.ri = { .status = "ok", .mode = "segmented", .engine = "readahead", .ioprio = "be" },
		.stats_fd = -1, .uid = -1, .gid = -1,
	};
	struct wsr_schedule s = { 0 };
	struct engine e = { 0 };
	struct exit_check xc;
	struct appwatch *w = NULL;
	int ex = parse_options(argc, argv, &c);
	if (ex >= 0)
		return ex;
	/* the app's pidfd now, while its exec is held: its pid cannot be reused before we wait */
	int exit_fd = c.judge_wait_s ? exit_check_open(c.app_pid) : -1;
	FILE *sf = open_stats(&c);

	ex = prepare(&c, &s, &e);
	if (!ex) {
		/* with --pid: when the released app waits on the disk (sampled until its exit) */
		if (exit_fd >= 0)
			c.o.watch = w = appwatch_start(c.app_pid, replay_nsegs(&s, c.o.mode));
		announce_start(c.o.notify_fd);
		int rc = replay_run(&s, &e, &c.o, &st);
		if (rc) {
			c.ri.status = "error";
			c.ri.error = strerror(-rc);
			ex = 1;
		}
		appwatch_segment(c.o.watch, (int)st.nsegs);   /* the replay is done: "after" */
		e.fini(&e);
		if (exit_fd >= 0) {
			exit_check_run(exit_fd, &s, st.outside_at_open, c.judge_wait_s, &xc);
			exit_fd = -1;
			c.ri.exit = &xc;
		}
		if (c.o.watch) {
			appwatch_stop(c.o.watch);
			c.ri.watch = c.o.watch;
		}
	}
	if (sf && ex != EXIT_USAGE)   /* a bad --ioprio is a usage error: no report */
		stats_write(sf, &c.ri, &st, e.name ? &e : NULL);
	if (exit_fd >= 0)
		close(exit_fd);
	if (sf)
		fclose(sf);
	appwatch_free(w);
	free(st.segs);
	free(st.outside_at_open);
	wsr_free(&s);
	return ex;
}
