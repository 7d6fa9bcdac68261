#include "appwatch.h"

#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "clock.h"

#define SCAN_EVERY_NS 10000000ull   /* new processes of the app looked for every 10 ms */
#define LATE 5                      /* a look late (a busy machine) counts 5 intervals at most */

char appwatch_state(const char *line)
{
	const char *p = line ? strrchr(line, ')') : NULL;
	if (!p || p[1] != ' ' || !p[2])
		return 0;
	return p[2];
}

static ssize_t read_small(const char *path, char *buf, size_t n)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -1;
	ssize_t r = read(fd, buf, n - 1);
	close(fd);
	if (r < 0)
		return -1;
	buf[r] = 0;
	return r;
}

static bool followed(const struct appwatch *w, pid_t p)
{
	for (uint32_t i = 0; i < w->nprocs; i++)
		if (w->procs[i] == p)
			return true;
	return false;
}

static void follow(struct appwatch *w, pid_t p)
{
	if (w->nprocs < APPWATCH_TASKS && !followed(w, p)) {
		w->procs[w->nprocs++] = p;
		w->procs_seen++;
	}
}

/* The pid most recently handed out in our pid namespace (the last field of /proc/loadavg), or -1. */
static pid_t last_pid(void)
{
	char buf[128];
	if (read_small("/proc/loadavg", buf, sizeof(buf)) <= 0)
		return -1;
	const char *p = strrchr(buf, ' ');
	return p ? (pid_t)atoi(p + 1) : -1;
}

/* Processes started since the last scan whose parent is followed: the pids handed out since
 * then, in order (a grandchild comes after its parent), wrapping at pid_max as the kernel does
 * (to RESERVED_PIDS, 300). Not "every pid above the highest seen": after a wrap, old processes
 * keep pids above every new one. At most SCAN_PIDS per scan (a fork storm: the rest skipped). */
#define SCAN_PIDS 4096
static void scan_children(struct appwatch *w)
{
	pid_t cur = last_pid();
	if (cur <= 0 || w->pid_max <= 0)
		return;
	char path[64], buf[512];
	uint32_t n = 0;
	for (pid_t p = w->last_pid; p != cur && n < SCAN_PIDS; n++) {
		p = p + 1 >= w->pid_max ? 300 : p + 1;
		snprintf(path, sizeof(path), "/proc/%d/stat", p);
		if (read_small(path, buf, sizeof(buf)) <= 0)
			continue;
		const char *q = strrchr(buf, ')');
		int ppid;
		char st;
		if (q && sscanf(q + 1, " %c %d", &st, &ppid) == 2 && followed(w, ppid))
			follow(w, p);
	}
	w->last_pid = cur;
}

static void count_wchan(struct appwatch *w, pid_t p, pid_t tid)
{
	char path[96], name[48];
	snprintf(path, sizeof(path), "/proc/%d/task/%d/wchan", p, tid);
	if (read_small(path, name, sizeof(name)) <= 0 || !strcmp(name, "0")) {
		w->other_wchan++;
		return;
	}
	for (char *c = name; *c; c++)   /* a kernel symbol; anything else would break the JSON */
		if (!isalnum((unsigned char)*c) && *c != '_' && *c != '.')
			*c = '_';
	int free_slot = -1;
	for (int i = 0; i < APPWATCH_WCHANS; i++) {
		if (w->wchan[i].n && !strcmp(w->wchan[i].name, name)) {
			w->wchan[i].n++;
			return;
		}
		if (!w->wchan[i].n && free_slot < 0)
			free_slot = i;
	}
	if (free_slot < 0) {
		w->other_wchan++;
		return;
	}
	snprintf(w->wchan[free_slot].name, sizeof(w->wchan[free_slot].name), "%s", name);
	w->wchan[free_slot].n = 1;
}

/* The run delay of a task (the second field of its schedstat), kept as its latest value; its
 * run time (the first) is returned, 0 if unreadable. */
static uint64_t note_run_delay(struct appwatch *w, pid_t p, const char *tid)
{
	char path[320], buf[96];
	snprintf(path, sizeof(path), "/proc/%d/task/%s/schedstat", p, tid);
	unsigned long long on_cpu, delay;
	if (read_small(path, buf, sizeof(buf)) <= 0 || sscanf(buf, "%llu %llu", &on_cpu, &delay) != 2)
		return 0;
	pid_t t = (pid_t)atoi(tid);
	for (uint32_t i = 0; i < w->runq_tasks; i++)
		if (w->runq[i].tid == t) {
			w->runq[i].delay_ns = delay;
			return on_cpu;
		}
	if (w->runq_tasks < APPWATCH_RUNQ_TASKS)
		w->runq[w->runq_tasks++] = (typeof(w->runq[0])){t, delay};
	else
		w->runq_full = true;   /* a task it cannot keep: runq_ns is then a lower bound */
	return on_cpu;
}

/* The CPU time of the children a process has waited for (cutime + cstime of its stat), in ns. */
static uint64_t reaped_cpu_ns(pid_t p)
{
	char path[64], buf[512];
	snprintf(path, sizeof(path), "/proc/%d/stat", p);
	if (read_small(path, buf, sizeof(buf)) <= 0)
		return 0;
	const char *q = strrchr(buf, ')');
	long cu, cs;
	static long tick_ns;
	if (!tick_ns)
		tick_ns = 1000000000l / sysconf(_SC_CLK_TCK);
	if (!q || sscanf(q + 1, " %*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %*u %*u %ld %ld", &cu, &cs) != 2)
		return 0;
	return (uint64_t)(cu + cs) * (uint64_t)tick_ns;
}

/* One look at every task of every followed process: is one running, is one waiting in D?
 * Processes gone are dropped; returns false once none is left. */
static bool sample(struct appwatch *w, bool *running, bool *waiting, pid_t *dp, pid_t *dtid)
{
	char path[64], buf[512];
	uint64_t cpu = 0;
	*running = *waiting = false;
	for (uint32_t i = 0; i < w->nprocs;) {
		snprintf(path, sizeof(path), "/proc/%d/task", w->procs[i]);
		DIR *d = opendir(path);
		if (!d) {
			w->procs[i] = w->procs[--w->nprocs];
			continue;
		}
		struct dirent *de;
		while ((de = readdir(d))) {
			if (!isdigit((unsigned char)de->d_name[0]))
				continue;
			char tpath[320];
			snprintf(tpath, sizeof(tpath), "/proc/%d/task/%s/stat", w->procs[i], de->d_name);
			if (read_small(tpath, buf, sizeof(buf)) <= 0)
				continue;
			char s = appwatch_state(buf);
			cpu += note_run_delay(w, w->procs[i], de->d_name);
			if (s == 'R')
				*running = true;
			else if (s == 'D' && !*waiting) {
				*waiting = true;
				*dp = w->procs[i];
				*dtid = (pid_t)atoi(de->d_name);
			}
		}
		closedir(d);
		cpu += reaped_cpu_ns(w->procs[i]);
		i++;
	}
	if (cpu > w->app_cpu_ns)
		w->app_cpu_ns = cpu;
	return w->nprocs > 0;
}

static uint64_t cpu_now_ns(void)
{
	struct timespec t;
	if (clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t))
		return 0;
	return (uint64_t)t.tv_sec * 1000000000ull + (uint64_t)t.tv_nsec;
}

static void loop(struct appwatch *w)
{
	uint64_t prev = 0;
	int wait_seg = -1;   /* where the previous look's wait was charged; -1: it saw none */
	struct timespec next;
	clock_gettime(CLOCK_MONOTONIC, &next);
	uint64_t interval = APPWATCH_INTERVAL_NS, avg_cost = 0;
	while (!__atomic_load_n(&w->stop, __ATOMIC_ACQUIRE)) {
		next.tv_nsec += (long)interval;
		while (next.tv_nsec >= 1000000000) {
			next.tv_nsec -= 1000000000;
			next.tv_sec++;
		}
		clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &next, NULL);
		uint64_t rel = __atomic_load_n(&w->release_ns, __ATOMIC_ACQUIRE);
		if (!rel)
			continue;   /* the app is held at its exec (itself a D-state wait): not the disk's */
		uint64_t now = mono_ns(), cpu0 = cpu_now_ns();
		if (now - rel > APPWATCH_MAX_NS) {
			w->capped = true;
			break;
		}
		if (now - w->last_scan_ns >= SCAN_EVERY_NS) {
			scan_children(w);
			w->last_scan_ns = now;
		}
		bool running, waiting;
		pid_t dp = 0, dtid = 0;
		if (!sample(w, &running, &waiting, &dp, &dtid))
			break;   /* the app and all it started are gone */
		uint64_t dt = prev ? now - prev : APPWATCH_INTERVAL_NS, late = 0;
		if (dt > LATE * interval) {
			late = dt - LATE * interval;
			dt = LATE * interval;
			w->late_samples++;
		}
		prev = now;
		w->samples++;
		if (running)
			w->running_samples++;
		/* the time between two looks that both saw the app waiting counts whole; where a wait
		 * began or ended between them, half (it did so anywhere in there) */
		if (waiting && !running) {
			int seg = __atomic_load_n(&w->seg, __ATOMIC_ACQUIRE);
			if (seg < 0 || (uint32_t)seg > w->nsegs)
				seg = (int)w->nsegs;
			w->waiting_samples++;
			w->waited_ns[seg] += wait_seg >= 0 ? dt : dt / 2;
			w->late_wait_ns += wait_seg >= 0 ? late : late / 2;
			wait_seg = seg;
			if (!w->first_wait_ns)
				w->first_wait_ns = now - rel;
			w->last_wait_ns = now - rel;
			count_wchan(w, dp, dtid);
		} else {
			if (wait_seg >= 0) {
				w->waited_ns[wait_seg] += dt / 2;
				w->late_wait_ns += late / 2;
			}
			wait_seg = -1;
		}
		/* bounded cost: at most ~2 % of a CPU (an app of many threads is sampled less often),
		 * and every 10 ms once the launch has run APPWATCH_FULL_NS. The look's CPU, not its
		 * wall time: on a busy machine a look is preempted for a time slice or more (8-13 ms
		 * seen), and counting that as its cost left 2-4 looks in a launch. The average of the
		 * recent looks' CPU (1/8 each), not the last one's: in this VM the watch spends 100-205 us
		 * per look, and with the last one's a CI run counted 55 of the app's 94 ms of waits in 3
		 * looks, ~18 ms apart (inferred: one costly look stretching the next interval). */
		uint64_t cost = cpu_now_ns() - cpu0;
		avg_cost = avg_cost ? avg_cost - avg_cost / 8 + cost / 8 : cost;
		interval = now - rel > APPWATCH_FULL_NS ? 5 * APPWATCH_INTERVAL_NS : APPWATCH_INTERVAL_NS;
		if (50 * avg_cost > interval)
			interval = 50 * avg_cost;
		if (interval > w->max_interval_ns)
			w->max_interval_ns = interval;
	}
	w->cpu_ns = cpu_now_ns();
	for (uint32_t i = 0; i < w->runq_tasks; i++)
		w->runq_ns += w->runq[i].delay_ns;
}

static size_t mapping_size(uint32_t nsegs)
{
	return sizeof(struct appwatch) + ((size_t)nsegs + 1) * sizeof(uint64_t);
}

struct appwatch *appwatch_start(pid_t pid, uint32_t nsegs)
{
	struct appwatch *w = mmap(NULL, mapping_size(nsegs), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS,
				  -1, 0);
	if (w == MAP_FAILED)
		return NULL;
	w->nsegs = nsegs;
	w->waited_ns = (uint64_t *)(w + 1);   /* the same address in the sampling process */
	char buf[32];
	w->pid_max = read_small("/proc/sys/kernel/pid_max", buf, sizeof(buf)) > 0 ? (pid_t)atoi(buf) : -1;
	w->last_pid = last_pid();   /* the app, held at its exec, has started nothing yet */
	follow(w, pid);
	pid_t parent = getpid();
	pid_t child = fork();
	if (child < 0) {
		int e = errno;
		munmap(w, mapping_size(nsegs));
		errno = e;
		return NULL;
	}
	if (child == 0) {
		/* dies with the replayer; holds none of its files (the daemon's pipe, the report) */
		prctl(PR_SET_PDEATHSIG, SIGKILL);
		if (getppid() != parent)
			_exit(0);
		close_range(3, ~0u, 0);
		loop(w);
		_exit(0);   /* not exit(): the replayer's stdio buffers are not ours to flush */
	}
	w->child = child;
	return w;
}

void appwatch_released(struct appwatch *w, uint64_t t)
{
	if (w)
		__atomic_store_n(&w->release_ns, t ? t : 1, __ATOMIC_RELEASE);
}

void appwatch_segment(struct appwatch *w, int seg)
{
	if (w)
		__atomic_store_n(&w->seg, seg, __ATOMIC_RELEASE);
}

void appwatch_stop(struct appwatch *w)
{
	if (!w->child)
		return;
	__atomic_store_n(&w->stop, true, __ATOMIC_RELEASE);
	while (waitpid(w->child, NULL, 0) < 0 && errno == EINTR)
		;
	w->child = 0;
}

void appwatch_free(struct appwatch *w)
{
	if (!w)
		return;
	appwatch_stop(w);
	munmap(w, mapping_size(w->nsegs));
}

void appwatch_write(FILE *f, const struct appwatch *w)
{
	uint64_t total = 0;
	for (uint32_t i = 0; w->waited_ns && i <= w->nsegs; i++)
		total += w->waited_ns[i];
	fprintf(f, "\"app_wait\": {\"interval_ns\": %llu, \"samples\": %llu, \"running_samples\": %llu, "
		"\"waiting_samples\": %llu, \"late_samples\": %llu, \"max_interval_ns\": %llu, \"late_wait_ns\": %llu, \"waited_ns\": %llu, \"first_wait_ns\": %llu, \"last_wait_ns\": %llu, "
		"\"procs_seen\": %u, \"cpu_ns\": %llu, \"app_cpu_ns\": %llu, \"capped\": %s, \"runq_ns\": %llu, \"runq_tasks\": %u, \"runq_full\": %s, \"segments_ns\": [",
		APPWATCH_INTERVAL_NS, (unsigned long long)w->samples, (unsigned long long)w->running_samples,
		(unsigned long long)w->waiting_samples, (unsigned long long)w->late_samples, (unsigned long long)w->max_interval_ns,
		(unsigned long long)w->late_wait_ns, (unsigned long long)total,
		(unsigned long long)w->first_wait_ns, (unsigned long long)w->last_wait_ns, w->procs_seen,
		(unsigned long long)w->cpu_ns, (unsigned long long)w->app_cpu_ns, w->capped ? "true" : "false",
		(unsigned long long)w->runq_ns, w->runq_tasks, w->runq_full ? "true" : "false");
	for (uint32_t i = 0; w->waited_ns && i < w->nsegs; i++)
		fprintf(f, "%s%llu", i ? ", " : "", (unsigned long long)w->waited_ns[i]);
	fprintf(f, "], \"after_ns\": %llu, \"wchan\": {",
		w->waited_ns ? (unsigned long long)w->waited_ns[w->nsegs] : 0ull);
	bool first = true;
	for (int i = 0; i < APPWATCH_WCHANS; i++) {
		if (!w->wchan[i].n)
			continue;
		/* [A-Za-z0-9_.] only (count_wchan): safe in a JSON string */
		fprintf(f, "%s\"%s\": %u", first ? "" : ", ", w->wchan[i].name, w->wchan[i].n);
		first = false;
	}
	fprintf(f, "%s\"other\": %llu}}", first ? "" : ", ", (unsigned long long)w->other_wchan);
}
