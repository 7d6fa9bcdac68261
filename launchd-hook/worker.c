/* warmstartd's worker: answers FAN_OPEN_EXEC_PERM events. Unrelated executables are allowed
 * after one fstat and a binary search of the in-memory index; a recorded app's exec is held
 * until its replayer reports the pre-buffer fetched, or its deadline (the entry's hold from the
 * replayer's start, docs/hook.md), or any error. */
#include "daemon.h"
#include "index.h"
#include "procinfo.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/fanotify.h>
#include <sys/inotify.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#define MAX_HOLDS 32
#define MAX_LAUNCHES 64 /* the most recent hooked processes */
#define LAT_RING 8192
#define FAN_BUF 8192
#define LEARN_SEEN 512
#define LEARN_RETRY_NS 60000000000ull /* ask the learner about one (exe, argv) at most once a minute */

struct hold {
	int event_fd;   /* -1: slot free */
	int notify_fd;
	pid_t replayer;
	pid_t app;
	uint64_t start_ns, deadline_ns;
	uint64_t hold_ns;     /* the entry's hold, counted from the replayer's "start" */
	uint64_t started_ns;  /* when the replayer said "start" (0: not yet) */
	uint64_t schedule_id; /* not an entry index: the index may be reloaded during a hold */
	int learn;            /* held for the learner (notify_fd is its socket), not a replayer */
	char stats[200];      /* the replayer's stats file ("" without --launch-dir) */
	uid_t uid;            /* the launching user: the learner keeps their own view for them */
};

/* A process a replayer was started for. exec keeps the pid and its start time, so when a hooked
 * wrapper (env, chroot) goes on to exec the app itself, the app's exec finds its prefetch here,
 * whether that replayer still runs or has already finished. */
struct launch {
	pid_t app;          /* 0: slot free */
	uint64_t starttime; /* of the app's process: a reused pid is another process */
	uint64_t app_key;   /* launch_key: the app whose launch this is */
};

struct seen {
	uint64_t key, t_ns;
};

struct watch {
	int wd;
	uint32_t entry, file_no;
};

struct worker {
	const struct ws_options *opt;
	struct ws_heartbeat *hb;
	int fan, ino, sig, index_wd;
	struct ws_index idx;
	uint8_t *stale; /* per entry: set when a scheduled file changed */
	struct watch *watches;
	size_t n_watches;
	struct hold holds[MAX_HOLDS];
	struct launch launches[MAX_LAUNCHES];
	unsigned n_launches;
	uint32_t lat_ns[LAT_RING]; /* decision times of unrelated execs */
	uint64_t n_lat, n_events, n_matched, n_allowed_error, n_learn;
	struct seen seen[LEARN_SEEN];
	FILE *events;
};

static void emit_event(struct worker *w, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#include <stdarg.h>
static void emit_event(struct worker *w, const char *fmt, ...)
{
	va_list ap;

	if (!w->events)
		return;
	fprintf(w->events, "{\"t\": %.6f, ", ws_now_ns() / 1e9);
	va_start(ap, fmt);
	vfprintf(w->events, fmt, ap);
	va_end(ap);
	fputs("}\n", w->events);
	fflush(w->events);
}

static void respond(struct worker *w, int fd, uint32_t verdict)
{
	struct fanotify_response r = {.fd = fd, .response = verdict};

	/* ENOENT: the event is gone (the launching process was killed); nothing to do */
	if (write(w->fan, &r, sizeof(r)) < 0 && errno != ENOENT)
		ws_log("answering exec event fd %d: %s", fd, strerror(errno));
	close(fd);
}

/* ---- index and its watches ---- */

static void drop_watches(struct worker *w)
{
	for (size_t i = 0; i < w->n_watches; i++)
		inotify_rm_watch(w->ino, w->watches[i].wd);
	free(w->watches);
	w->watches = NULL;
	w->n_watches = 0;
}

/* Entry i's schedule is stale: so is every entry replaying it (an app and its launcher).
 * reason NULL: known from the index, no event. */
static void mark_stale(struct worker *w, uint32_t i, uint32_t file_no, const char *reason)
{
	uint64_t sid = w->idx.entries[i].schedule_id;

	for (uint32_t j = 0; j < w->idx.hdr->n_entries; j++)
		if (w->idx.entries[j].schedule_id == sid)
			w->stale[j] = 1;
	if (reason)
		emit_event(w, "\"event\": \"stale\", \"schedule_id\": %llu, \"file_no\": %u, \"reason\": \"%s\"",
			   (unsigned long long)sid, file_no, reason);
}

static void add_file_watches(struct worker *w)
{
	size_t cap = 0;

	for (uint32_t i = 0; i < w->idx.hdr->n_entries; i++) {
		const struct ws_index_entry *e = &w->idx.entries[i];
		const char *p = ws_index_str(&w->idx, e->files_off), *end = p + e->files_len;
		uint32_t file_no = 0;

		for (; p < end; p += strlen(p) + 1, file_no++) {
			int wd = inotify_add_watch(w->ino, p, IN_MODIFY | IN_ATTRIB | IN_CLOSE_WRITE |
								 IN_DELETE_SELF | IN_MOVE_SELF | IN_DONT_FOLLOW);
			if (wd < 0) {
				/* missing already: the schedule is stale from the start */
				if (errno == ENOENT && !w->stale[i])
					mark_stale(w, i, file_no, "missing");
				continue;
			}
			if (w->n_watches == cap) {
				struct watch *nw = realloc(w->watches, (cap ? cap * 2 : 64) * sizeof(*nw));

				if (!nw) {
					ws_log("out of memory for file watches; staleness is checked at replay only");
					return;
				}
				w->watches = nw;
				cap = cap ? cap * 2 : 64;
			}
			w->watches[w->n_watches++] = (struct watch){wd, i, file_no};
		}
	}
}

static void mark_paths(struct worker *w)
{
	/* Indexed executables get inode marks: an unrelated exec then raises no event at all.
	 * --mark paths (learning: "everything under /usr/bin") get mount marks. */
	fanotify_mark(w->fan, FAN_MARK_FLUSH, 0, AT_FDCWD, NULL);
	fanotify_mark(w->fan, FAN_MARK_FLUSH | FAN_MARK_MOUNT, 0, AT_FDCWD, NULL);
	for (uint32_t i = 0; w->idx.hdr && i < w->idx.hdr->n_entries; i++) {
		const char *exe = ws_index_str(&w->idx, w->idx.entries[i].exe_off);

		if (fanotify_mark(w->fan, FAN_MARK_ADD | FAN_MARK_DONT_FOLLOW, FAN_OPEN_EXEC_PERM, AT_FDCWD, exe) < 0)
			ws_log("cannot mark %s: %s (its launches are not hooked)", exe, strerror(errno));
	}
	for (int i = 0; i < w->opt->n_marks; i++)
		if (fanotify_mark(w->fan, FAN_MARK_ADD | FAN_MARK_MOUNT | FAN_MARK_DONT_FOLLOW,
				  FAN_OPEN_EXEC_PERM, AT_FDCWD, w->opt->marks[i]) < 0)
			ws_log("cannot mark the mount of %s: %s", w->opt->marks[i], strerror(errno));
}

static void load_index(struct worker *w)
{
	struct ws_index fresh;
	int err = ws_index_open(&fresh, w->opt->index_path, 0);   /* root's only */

	if (err) {
		/* keep serving the previous index; a bad file must not stop the hook */
		if (err == -EPERM)
			ws_log("index %s refused: not owned by root or writable by others; fix with "
			       "`warmstart hook install` (keeping %u entries)", w->opt->index_path,
			       w->idx.hdr ? w->idx.hdr->n_entries : 0);
		else if (err != -ENOENT || w->idx.hdr)
			ws_log("index %s not loaded: %s; run `warmstart hook install` to rewrite it",
			       w->opt->index_path, strerror(-err));
		if (!w->idx.hdr)
			mark_paths(w);
		return;
	}
	drop_watches(w);
	ws_index_close(&w->idx);
	free(w->stale);
	w->idx = fresh;
	w->stale = calloc(fresh.hdr->n_entries + 1, 1);
	for (uint32_t i = 0; i < fresh.hdr->n_entries; i++)
		if (fresh.entries[i].flags & WS_ENTRY_STALE)
			mark_stale(w, i, 0, NULL);
	mark_paths(w);
	add_file_watches(w);
	ws_log("index %s: %u entries, %zu file watches", w->opt->index_path, fresh.hdr->n_entries, w->n_watches);
}

static void handle_inotify(struct worker *w)
{
	char buf[4096] __attribute__((aligned(__alignof__(struct inotify_event))));
	const char *base = strrchr(w->opt->index_path, '/');
	ssize_t n;
	int reload = 0;

	base = base ? base + 1 : w->opt->index_path;
	while ((n = read(w->ino, buf, sizeof(buf))) > 0) {
		for (char *p = buf; p < buf + n;) {
			struct inotify_event *ev = (struct inotify_event *)p;

			if (ev->wd == w->index_wd) {
				if (ev->len && strcmp(ev->name, base) == 0)
					reload = 1;
			} else if (!(ev->mask & IN_IGNORED)) {
				for (size_t i = 0; i < w->n_watches; i++) {
					struct watch *wt = &w->watches[i];

					if (wt->wd != ev->wd || w->stale[wt->entry])
						continue;
					mark_stale(w, wt->entry, wt->file_no, "changed");
					ws_log("schedule %llu stale: file %u changed",
					       (unsigned long long)w->idx.entries[wt->entry].schedule_id, wt->file_no);
				}
			}
			p += sizeof(*ev) + ev->len;
		}
	}
	if (reload)
		load_index(w);
}

/* ---- exec events ---- */

static int free_hold(struct worker *w)
{
	for (int i = 0; i < MAX_HOLDS; i++)
		if (w->holds[i].event_fd < 0)
			return i;
	return -1;
}

static void release(struct worker *w, struct hold *h, const char *outcome)
{
	uint64_t now = ws_now_ns();
	char started[32] = "null";   /* a replayer that never said "start" */

	if (h->started_ns)
		snprintf(started, sizeof(started), "%.3f", (h->started_ns - h->start_ns) / 1e6);

	/* the record first, then the answer: once allowed, the app may exit (and whoever waits for
	 * it read the events file) before this worker runs again on a busy machine */
	if (h->learn)
		emit_event(w, "\"event\": \"learn\", \"pid\": %d, \"held_ms\": %.3f, \"outcome\": \"%s\"",
			   (int)h->app, (now - h->start_ns) / 1e6, outcome);
	else
		emit_event(w, "\"event\": \"launch\", \"schedule_id\": %llu, \"pid\": %d, \"replayer_pid\": %d, "
			      "\"held_ms\": %.3f, \"outcome\": \"%s\", \"t_exec\": %.6f, \"stats\": \"%s\", "
			      "\"uid\": %u, \"started_ms\": %s",
			   (unsigned long long)h->schedule_id, (int)h->app, (int)h->replayer,
			   (now - h->start_ns) / 1e6, outcome, h->start_ns / 1e9, h->stats, (unsigned)h->uid, started);
	respond(w, h->event_fd, FAN_ALLOW);
	close(h->notify_fd);
	h->event_fd = -1;
	w->hb->held--;
}

static uint64_t fnv1a(uint64_t h, const void *p, size_t n)
{
	const unsigned char *c = p;

	for (size_t i = 0; i < n; i++)
		h = (h ^ c[i]) * 0x100000001b3ull;
	return h;
}

static int under_learn_prefix(const struct ws_options *o, const char *path)
{
	for (int i = 0; i < o->n_learn_prefixes; i++) {
		size_t n = strlen(o->learn_prefixes[i]);

		while (n > 1 && o->learn_prefixes[i][n - 1] == '/')
			n--;
		if (strncmp(path, o->learn_prefixes[i], n) == 0 && (path[n] == '/' || path[n] == '\0'))
			return 1;
	}
	return 0;
}

/* An exec of an executable the index does not know, on a learn-marked mount: if it is under a
 * learn prefix, ask the learner (unix socket, owned by root) to record this launch. Request:
 * "LEARN pid dev ino size mtime_ns argc\n", then the executable's path and each argument,
 * NUL-terminated. The exec is held until the learner answers (a byte: tracing runs) or closes
 * (it declined), or the deadline. Returns 1 if a hold started (the event is answered later). */
static int try_learn(struct worker *w, const struct fanotify_event_metadata *m, const struct stat *st,
		     uint64_t t0)
{
	char link[64], exe[PATH_MAX], head[160];
	struct sockaddr_un sa = {.sun_family = AF_UNIX};
	struct ucred cred;
	socklen_t cl = sizeof(cred);
	struct ws_argv *av;
	struct iovec iov[2 + WS_ARGV_MAX];
	uint64_t key, now = ws_now_ns();
	ssize_t n;
	int slot, sock, niov = 0, oldest = 0;

	snprintf(link, sizeof(link), "/proc/self/fd/%d", m->fd);
	n = readlink(link, exe, sizeof(exe) - 1);
	if (n <= 0)
		return 0;
	exe[n] = '\0';
	if (!under_learn_prefix(w->opt, exe) || (slot = free_hold(w)) < 0)
		return 0;
	av = malloc(sizeof(*av));
	if (!av || ws_exec_argv(m->pid, av) < 0) {
		free(av);
		return 0;
	}
	key = fnv1a(0xcbf29ce484222325ull, &st->st_dev, sizeof(st->st_dev));
	key = fnv1a(key, &st->st_ino, sizeof(st->st_ino));
	for (int i = 0; i < av->argc; i++)
		key = fnv1a(key, av->argv[i], strlen(av->argv[i]) + 1);
	for (int i = 0; i < LEARN_SEEN; i++) {
		if (w->seen[i].key == key && now - w->seen[i].t_ns < LEARN_RETRY_NS) {
			free(av);
			return 0;
		}
		if (w->seen[i].t_ns < w->seen[oldest].t_ns)
			oldest = i;
	}
	w->seen[oldest] = (struct seen){key, now};
	snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", w->opt->learner);
	sock = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	if (sock < 0 || connect(sock, (struct sockaddr *)&sa, sizeof(sa)) < 0 ||
	    getsockopt(sock, SOL_SOCKET, SO_PEERCRED, &cred, &cl) < 0 || cred.uid != 0) {
		if (sock >= 0)
			close(sock);
		free(av);
		return 0; /* no learner, or one not run by root: never hand it an exec */
	}
	snprintf(head, sizeof(head), "LEARN %d %llu %llu %lld %lld %d\n", (int)m->pid,
		 (unsigned long long)st->st_dev, (unsigned long long)st->st_ino, (long long)st->st_size,
		 (long long)st->st_mtim.tv_sec * 1000000000ll + st->st_mtim.tv_nsec, av->argc);
	iov[niov++] = (struct iovec){head, strlen(head)};
	iov[niov++] = (struct iovec){exe, strlen(exe) + 1};
	for (int i = 0; i < av->argc; i++)
		iov[niov++] = (struct iovec){av->argv[i], strlen(av->argv[i]) + 1};
	n = writev(sock, iov, niov); /* < 10 KiB: fits the socket buffer of a fresh connection */
	free(av);
	if (n < 0) {
		close(sock);
		return 0;
	}
	w->holds[slot] = (struct hold){.event_fd = m->fd, .notify_fd = sock, .app = m->pid, .start_ns = t0,
				       .deadline_ns = t0 + WS_LEARN_HOLD_MS * 1000000ull, .learn = 1};
	w->hb->held++;
	w->n_learn++;
	return 1;
}

/* Which app an entry launches: its name's hash. Not its schedule id: the index may be replaced
 * between the wrapper's exec and the app's (the learner switches a trial's schedule, a new
 * analysis lands) and the app's entry then names another schedule of the same app; that launch
 * is still in flight (a second replayer would find the first one's pages cached and be stored as
 * a warm launch of its own). */
static uint64_t launch_key(const struct worker *w, const struct ws_index_entry *e)
{
	return e->name_len ? ws_fnv1a64(ws_index_str(&w->idx, e->name_off), e->name_len) : e->schedule_id;
}

static int in_flight(const struct worker *w, pid_t app, uint64_t starttime, uint64_t app_key)
{
	for (int i = 0; i < MAX_LAUNCHES; i++)
		if (w->launches[i].app == app && w->launches[i].starttime == starttime &&
		    w->launches[i].app_key == app_key)
			return 1;
	return 0;
}

static void note_launch(struct worker *w, pid_t app, uint64_t starttime, uint64_t app_key)
{
	w->launches[w->n_launches++ % MAX_LAUNCHES] = (struct launch){app, starttime, app_key};
}

/* The index entry this exec of a recorded executable by `uid` matches: its identity, the argv it
 * is exec'd with for signatures, and an owner whose schedule this user may use (another user's
 * learned schedule never serves this launch). NULL if none; an identity mismatch is written as
 * an event. */
static const struct ws_index_entry *match_exec(struct worker *w, const struct fanotify_event_metadata *m,
					       const struct stat *st, uid_t uid)
{
	const struct ws_index_entry *e;
	struct ws_argv *av = malloc(sizeof(*av));
	int mismatch = 0, err;

	if (av && (err = ws_exec_argv(m->pid, av)) < 0) {
		ws_log("pid %d: the argv of its exec is unreadable (%s): no argv signature can match",
		       (int)m->pid, strerror(-err));
		free(av);
		av = NULL;
	}
	e = ws_index_match(&w->idx, st->st_dev, st->st_ino, st->st_size,
			   (int64_t)st->st_mtim.tv_sec * 1000000000 + st->st_mtim.tv_nsec,
			   av ? av->argv : NULL, av ? av->argc : 0, uid, &mismatch);
	free(av);
	if (!e && mismatch)
		emit_event(w, "\"event\": \"identity-mismatch\", \"dev\": %llu, \"ino\": %llu",
			   (unsigned long long)st->st_dev, (unsigned long long)st->st_ino);
	return e;
}

/* Start e's replayer, as the exec's user, and hold the exec until the pre-buffer is in, the
 * replayer is gone or the entry's hold time passes. Without a free hold slot, the process's ids
 * or a replayer: FAN_ALLOW now. */
static void hold_for_replayer(struct worker *w, const struct fanotify_event_metadata *m,
			      const struct ws_index_entry *e, uint64_t starttime, uint64_t t0, uid_t uid, gid_t gid)
{
	char stats[sizeof(((struct hold *)0)->stats)];
	int slot = free_hold(w), nfd;
	pid_t rp;
	uint32_t hold_ms;

	if (slot < 0) {
		w->n_allowed_error++;
		respond(w, m->fd, FAN_ALLOW);
		return;
	}
	stats[0] = '\0';
	if (w->opt->launch_dir)
		snprintf(stats, sizeof(stats), "%s/%llu-%d-%llu.json", w->opt->launch_dir,
			 (unsigned long long)e->schedule_id, (int)m->pid, (unsigned long long)t0);
	rp = ws_spawn_replayer(w->opt->replayer, ws_index_str(&w->idx, e->sched_off), uid, gid, m->pid,
			       stats[0] ? stats : NULL, &nfd);
	if (rp < 0) {
		w->n_allowed_error++;
		ws_log("cannot start %s: %s", w->opt->replayer, strerror((int)-rp));
		respond(w, m->fd, FAN_ALLOW);
		return;
	}
	note_launch(w, m->pid, starttime, launch_key(w, e));
	hold_ms = ws_entry_hold_ms(&w->idx, e);
	w->holds[slot] = (struct hold){.event_fd = m->fd, .notify_fd = nfd, .replayer = rp,
				       .app = m->pid, .start_ns = t0, .hold_ns = hold_ms * 1000000ull,
				       .deadline_ns = t0 + (hold_ms + WS_START_ALLOW_MS) * 1000000ull,
				       .schedule_id = e->schedule_id, .uid = uid};
	memcpy(w->holds[slot].stats, stats, sizeof(stats));
	w->hb->held++;
}

/* Decide one exec. Every path that does not start a hold answers FAN_ALLOW right here. */
static void handle_exec(struct worker *w, const struct fanotify_event_metadata *m, uint64_t t0)
{
	const struct ws_index_entry *e;
	struct stat st;
	uint64_t starttime;
	uid_t uid;
	gid_t gid;

	w->n_events++;
	if (!w->idx.hdr || fstat(m->fd, &st) < 0 || !ws_index_find(&w->idx, st.st_dev, st.st_ino)) {
		if (w->opt->learner && w->idx.hdr && try_learn(w, m, &st, t0))
			return;
		respond(w, m->fd, FAN_ALLOW);
		w->lat_ns[w->n_lat++ % LAT_RING] = (uint32_t)(ws_now_ns() - t0);
		return;
	}
	if (ws_proc_ids(m->pid, &uid, &gid) < 0) { /* whose launch it is decides which entries serve it */
		w->n_allowed_error++;
		respond(w, m->fd, FAN_ALLOW);
		return;
	}
	e = match_exec(w, m, &st, uid);
	if (!e) {
		respond(w, m->fd, FAN_ALLOW);
		return;
	}
	starttime = ws_proc_starttime(m->pid);
	if (starttime && in_flight(w, m->pid, starttime, launch_key(w, e))) {
		/* the wrapper this process exec'd before (env, chroot) was hooked and decided this
		 * launch: its replayer is fetching (or done), having held the wrapper's exec */
		emit_event(w, "\"event\": \"exec-in-flight\", \"schedule_id\": %llu, \"pid\": %d",
			   (unsigned long long)e->schedule_id, (int)m->pid);
		respond(w, m->fd, FAN_ALLOW);
		return;
	}
	if (w->stale[e - w->idx.entries]) {
		note_launch(w, m->pid, starttime, launch_key(w, e));
		emit_event(w, "\"event\": \"launch\", \"schedule_id\": %llu, \"pid\": %d, "
			      "\"outcome\": \"stale\"", (unsigned long long)e->schedule_id, (int)m->pid);
		respond(w, m->fd, FAN_ALLOW);
		return;
	}
	w->n_matched++;
	hold_for_replayer(w, m, e, starttime, t0, uid, gid);
}

static void handle_fanotify(struct worker *w)
{
	char buf[FAN_BUF] __attribute__((aligned(__alignof__(struct fanotify_event_metadata))));
	ssize_t n;

	while ((n = read(w->fan, buf, sizeof(buf))) > 0) {
		uint64_t t0 = ws_now_ns();
		struct fanotify_event_metadata *m = (struct fanotify_event_metadata *)buf;

		for (; FAN_EVENT_OK(m, n); m = FAN_EVENT_NEXT(m, n)) {
			if (m->vers != FANOTIFY_METADATA_VERSION) {
				ws_log("fanotify metadata version %u unknown; exiting (execs are allowed)", m->vers);
				exit(1);
			}
			if (m->fd < 0)
				continue; /* FAN_NOFD: queue overflow; perm events are never dropped */
			if (m->mask & FAN_OPEN_EXEC_PERM)
				handle_exec(w, m, t0);
			else
				respond(w, m->fd, FAN_ALLOW);
		}
	}
}

static int cmp_u32(const void *a, const void *b)
{
	uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;

	return x < y ? -1 : x > y;
}

static void write_stats(struct worker *w)
{
	size_t n = w->n_lat < LAT_RING ? w->n_lat : LAT_RING;
	uint32_t *s = malloc((n + 1) * sizeof(*s));
	char tmp[PATH_MAX];
	FILE *f;

	if (!w->opt->stats_path || !s) {
		free(s);
		return;
	}
	memcpy(s, w->lat_ns, n * sizeof(*s));
	qsort(s, n, sizeof(*s), cmp_u32);
	snprintf(tmp, sizeof(tmp), "%s.tmp", w->opt->stats_path);
	f = ws_open_write(tmp, O_TRUNC, 0644);
	if (f) {
		fprintf(f, "{\"worker_pid\": %d, \"events\": %llu, \"matched\": %llu, \"allowed_on_error\": %llu, "
			   "\"unrelated_samples\": %zu, \"unrelated_decision_median_us\": %.3f, "
			   "\"unrelated_decision_p99_us\": %.3f, \"index_entries\": %u, \"file_watches\": %zu, "
			   "\"learn_requests\": %llu}\n",
			(int)getpid(), (unsigned long long)w->n_events, (unsigned long long)w->n_matched,
			(unsigned long long)w->n_allowed_error, n, n ? s[n / 2] / 1e3 : 0.0,
			n ? s[(n * 99) / 100] / 1e3 : 0.0, w->idx.hdr ? w->idx.hdr->n_entries : 0, w->n_watches,
			(unsigned long long)w->n_learn);
		if (fclose(f) == 0)
			rename(tmp, w->opt->stats_path);
	}
	free(s);
}

static int setup(struct worker *w)
{
	char dir[PATH_MAX];
	char *slash;
	sigset_t set;

	w->fan = fanotify_init(FAN_CLASS_CONTENT | FAN_CLOEXEC | FAN_NONBLOCK, O_RDONLY | O_LARGEFILE | O_CLOEXEC);
	if (w->fan < 0) {
		ws_log("fanotify_init(FAN_CLASS_CONTENT): %s; the kernel needs CONFIG_FANOTIFY_ACCESS_PERMISSIONS "
		       "and root; use `warmstart hook install --preload` instead", strerror(errno));
		return -errno;
	}
	w->ino = inotify_init1(IN_NONBLOCK | IN_CLOEXEC);
	if (w->ino < 0)
		return -errno;
	snprintf(dir, sizeof(dir), "%s", w->opt->index_path);
	slash = strrchr(dir, '/');
	if (slash == dir)
		slash[1] = '\0';
	else if (slash)
		*slash = '\0';
	else
		snprintf(dir, sizeof(dir), ".");
	/* the index is replaced by rename: watch its directory, not its inode */
	w->index_wd = inotify_add_watch(w->ino, dir, IN_MOVED_TO | IN_CLOSE_WRITE | IN_DELETE | IN_ONLYDIR);
	if (w->index_wd < 0)
		ws_log("cannot watch %s (%s): index changes need SIGHUP", dir, strerror(errno));
	ws_handled_signals(&set);
	sigprocmask(SIG_BLOCK, &set, NULL);
	w->sig = signalfd(-1, &set, SFD_NONBLOCK | SFD_CLOEXEC);
	if (w->sig < 0)
		return -errno;
	if (w->opt->events_path) {
		/* launch records name users' programs: readable by root only, also when an older
		 * warmstart created the file 0644 */
		w->events = ws_open_write(w->opt->events_path, O_APPEND, 0600);
		if (!w->events)
			ws_log("cannot append to %s: %s (launch records are not kept)", w->opt->events_path,
			       strerror(errno));
	}
	return 0;
}

/* What to poll: fanotify, inotify, signals, then the notify fd of each held exec's replayer
 * (hold_of: its hold); a hold past its deadline is released now. Returns the number of fds;
 * *timeout_ms: until the nearest deadline, at most 100 ms (the heartbeat's period). */
static int poll_set(struct worker *w, uint64_t now, struct pollfd *pfd, int *hold_of, int *timeout_ms)
{
	uint64_t next = now + 100000000ull;
	int nfds = 3;

	pfd[0] = (struct pollfd){w->fan, POLLIN, 0};
	pfd[1] = (struct pollfd){w->ino, POLLIN, 0};
	pfd[2] = (struct pollfd){w->sig, POLLIN, 0};
	for (int i = 0; i < MAX_HOLDS; i++) {
		if (w->holds[i].event_fd < 0)
			continue;
		if (w->holds[i].deadline_ns <= now) {
			release(w, &w->holds[i], "deadline");
			continue;
		}
		if (w->holds[i].deadline_ns < next)
			next = w->holds[i].deadline_ns;
		hold_of[nfds] = i;
		pfd[nfds++] = (struct pollfd){w->holds[i].notify_fd, POLLIN, 0};
	}
	*timeout_ms = (int)((next - now + 999999) / 1000000);
	return nfds;
}

/* A held exec's notify fd is readable. The learner's byte: its recorder is set up. A replayer's
 * "start": the hold counts from now (never past the deadline its start-up allowance set); its
 * "ready": the pre-buffer is in; EOF or an error: it is gone. Allow but on "start". */
static void notified(struct worker *w, struct hold *h)
{
	enum ws_notify said;
	uint64_t now;
	char c;

	if (h->learn) {
		release(w, h, read(h->notify_fd, &c, 1) == 1 ? "ready" : "replayer-exited");
		return;
	}
	said = ws_notify_read(h->notify_fd);
	now = ws_now_ns();
	if (said == WS_NOTIFY_START) {
		h->started_ns = now;
		if (now + h->hold_ns < h->deadline_ns)
			h->deadline_ns = now + h->hold_ns;
		return;
	}
	release(w, h, said == WS_NOTIFY_READY ? "ready" : "replayer-exited");
}

/* SIGCHLD: reap replayers; SIGHUP: reload the index; SIGUSR1: write the stats. Returns 0 after
 * SIGTERM or SIGINT (stop), else 1. */
static int handle_signals(struct worker *w)
{
	struct signalfd_siginfo si;
	int running = 1;

	while (read(w->sig, &si, sizeof(si)) == sizeof(si)) {
		if (si.ssi_signo == SIGCHLD) {
			while (waitpid(-1, NULL, WNOHANG) > 0)
				;
		} else if (si.ssi_signo == SIGHUP) {
			load_index(w);
		} else if (si.ssi_signo == SIGUSR1) {
			write_stats(w);
		} else {
			running = 0;
		}
	}
	return running;
}

int ws_worker_run(const struct ws_options *opt, struct ws_heartbeat *hb)
{
	static struct worker w;
	struct pollfd pfd[3 + MAX_HOLDS];
	int hold_of[3 + MAX_HOLDS];
	int running = 1, err;

	w.opt = opt;
	w.hb = hb;
	for (int i = 0; i < MAX_HOLDS; i++)
		w.holds[i].event_fd = -1;
	err = setup(&w);
	if (err)
		return 1;
	load_index(&w);
	hb->worker_pid = getpid();
	ws_log("worker %d ready (replayer %s)", (int)getpid(), opt->replayer);
	while (running) {
		uint64_t now = ws_now_ns();
		int nfds, timeout;

		hb->beat_ns = now;
		nfds = poll_set(&w, now, pfd, hold_of, &timeout);
		if (poll(pfd, nfds, timeout) < 0) {
			if (errno == EINTR)
				continue;
			ws_log("poll: %s", strerror(errno));
			break;
		}
		for (int i = 3; i < nfds; i++) {
			if (pfd[i].revents)
				notified(&w, &w.holds[hold_of[i]]);
		}
		if (pfd[0].revents)
			handle_fanotify(&w);
		if (pfd[1].revents)
			handle_inotify(&w);
		if (pfd[2].revents)
			running = handle_signals(&w);
	}
	for (int i = 0; i < MAX_HOLDS; i++)
		if (w.holds[i].event_fd >= 0)
			release(&w, &w.holds[i], "shutdown");
	write_stats(&w);
	fanotify_mark(w.fan, FAN_MARK_FLUSH | FAN_MARK_MOUNT, 0, AT_FDCWD, NULL);
	close(w.fan); /* the kernel allows anything still queued */
	ws_log("worker %d stopped", (int)getpid());
	return 0;
}
