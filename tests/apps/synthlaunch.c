/*
 * synthlaunch: a deterministic synthetic "application launch" for recorder and replayer tests.
 *
 * It performs a plan of steps in order, so a test knows exactly which file ranges a launch
 * reads, in which order, and how much CPU it burns between them:
 *
 *   read:PATH:OFFSET:LEN    open PATH, read LEN bytes at OFFSET (readahead off: FADV_RANDOM), close
 *   readra:PATH:OFFSET:LEN  the same with the kernel's normal readahead
 *   mmap:PATH:OFFSET:LEN    mmap PATH read-only and touch one byte per page of the range
 *   cpu:MS                  burn MS milliseconds of this thread's CPU time (a busy loop, not sleep)
 *   threads:N:MS            N threads each burn MS ms of CPU at once, then join
 *   print:TEXT              write TEXT and a newline to stdout (for --until stdout=...)
 *
 * Usage: synthlaunch STEP...   or   synthlaunch -f PLANFILE  (one step per line, # comments)
 * PATH may contain any byte except ':' and newline. Exits 0, or 1 with a message naming the
 * failing step and errno.
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

static long long thread_cpu_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
	return (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static volatile unsigned long sink;

static void burn_ms(long ms)
{
	long long end = thread_cpu_ns() + ms * 1000000LL;
	unsigned long x = 1;

	/* Reading the thread's CPU clock enters the kernel, which charges the task and emits
	 * sched_stat_runtime each time: read every ~30 us of work (20000 steps), not every ~1.5 us,
	 * or a 1 s launch makes 500,000 trace events and, on a busy machine, overflows the
	 * recorder's ring buffer (a recording with lost events that analyze refuses). */
	while (thread_cpu_ns() < end) {
		for (int i = 0; i < 20000; i++)
			x = x * 6364136223846793005UL + 1442695040888963407UL;
		sink = x;
	}
}

static void *burn_thread(void *arg)
{
	burn_ms((long)arg);
	return NULL;
}

/* Parse "PATH:OFFSET:LEN" from the end, so PATH may hold anything but ':'. */
static int parse_range(char *s, char **path, long long *off, long long *len)
{
	char *c2 = strrchr(s, ':'), *c1, *end;

	if (!c2)
		return -EINVAL;
	*c2 = 0;
	c1 = strrchr(s, ':');
	if (!c1)
		return -EINVAL;
	*c1 = 0;
	*off = strtoll(c1 + 1, &end, 0);
	if (*end || *off < 0)
		return -EINVAL;
	*len = strtoll(c2 + 1, &end, 0);
	if (*end || *len <= 0)
		return -EINVAL;
	*path = s;
	return 0;
}

static int do_read(char *arg, int readahead)
{
	char *path, *buf;
	long long off, len, done = 0;
	int fd, ret = 0;

	if (parse_range(arg, &path, &off, &len))
		return -EINVAL;
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	if (!readahead)
		posix_fadvise(fd, 0, 0, POSIX_FADV_RANDOM);
	buf = malloc(1 << 20);
	if (!buf) {
		close(fd);
		return -ENOMEM;
	}
	while (done < len) {
		size_t want = len - done > (1 << 20) ? (1 << 20) : (size_t)(len - done);
		ssize_t n = pread(fd, buf, want, off + done);

		if (n < 0) {
			ret = -errno;
			break;
		}
		if (n == 0) {
			ret = -ENODATA; /* the plan reads past EOF: a broken plan */
			break;
		}
		done += n;
	}
	free(buf);
	close(fd);
	return ret;
}

static int do_mmap(char *arg)
{
	char *path;
	long long off, len, pagesz = sysconf(_SC_PAGESIZE);
	long long start, span;
	unsigned char *p;
	unsigned long sum = 0;
	int fd;

	if (parse_range(arg, &path, &off, &len))
		return -EINVAL;
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	start = off - off % pagesz;
	span = off + len - start;
	p = mmap(NULL, span, PROT_READ, MAP_PRIVATE, fd, start);
	close(fd);
	if (p == MAP_FAILED)
		return -errno;
	madvise(p, span, MADV_RANDOM); /* touch only what the plan says */
	for (long long i = off - start; i < span; i += pagesz)
		sum += p[i];
	sink = sum;
	munmap(p, span);
	return 0;
}

static int do_threads(char *arg)
{
	char *end;
	long n = strtol(arg, &end, 10), ms;
	pthread_t tids[64];
	long started = 0;
	int ret = 0;

	if (*end != ':' || n < 1 || n > 64)
		return -EINVAL;
	ms = strtol(end + 1, &end, 10);
	if (*end || ms < 0)
		return -EINVAL;
	for (; started < n; started++) {
		int err = pthread_create(&tids[started], NULL, burn_thread, (void *)ms);

		if (err) {
			ret = -err;
			break;
		}
	}
	for (long i = 0; i < started; i++)
		pthread_join(tids[i], NULL);
	return ret;
}

static int run_step(char *step)
{
	char *colon = strchr(step, ':');
	char *arg, *end;

	if (!colon)
		return -EINVAL;
	*colon = 0;
	arg = colon + 1;
	if (!strcmp(step, "read"))
		return do_read(arg, 0);
	if (!strcmp(step, "readra"))
		return do_read(arg, 1);
	if (!strcmp(step, "mmap"))
		return do_mmap(arg);
	if (!strcmp(step, "threads"))
		return do_threads(arg);
	if (!strcmp(step, "cpu")) {
		long ms = strtol(arg, &end, 10);

		if (*end || ms < 0)
			return -EINVAL;
		burn_ms(ms);
		return 0;
	}
	if (!strcmp(step, "print")) {
		printf("%s\n", arg);
		fflush(stdout);
		return 0;
	}
	return -EINVAL;
}

static int checked_step(const char *text)
{
	char *copy = strdup(text);
	int ret;

	if (!copy)
		return -ENOMEM;
	ret = run_step(copy);
	free(copy);
	if (ret)
		fprintf(stderr, "synthlaunch: step '%s' failed: %s\n", text,
			ret == -EINVAL ? "malformed step" : strerror(-ret));
	return ret;
}

static int run_plan_file(const char *file)
{
	FILE *f = fopen(file, "re");
	char *line = NULL;
	size_t cap = 0;
	ssize_t n;
	int ret = 0;

	if (!f) {
		fprintf(stderr, "synthlaunch: cannot open plan %s: %s\n", file, strerror(errno));
		return -errno;
	}
	while ((n = getline(&line, &cap, f)) > 0) {
		while (n > 0 && (line[n - 1] == '\n' || line[n - 1] == '\r'))
			line[--n] = 0;
		if (n == 0 || line[0] == '#')
			continue;
		ret = checked_step(line);
		if (ret)
			break;
	}
	free(line);
	fclose(f);
	return ret;
}

int main(int argc, char **argv)
{
	if (argc < 2 || !strcmp(argv[1], "-h") || !strcmp(argv[1], "--help")) {
		fprintf(stderr, "usage: synthlaunch STEP... | synthlaunch -f PLANFILE\n"
			"steps: read:PATH:OFF:LEN readra:PATH:OFF:LEN mmap:PATH:OFF:LEN cpu:MS "
			"threads:N:MS print:TEXT\n");
		return argc < 2 ? 2 : 0;
	}
	if (!strcmp(argv[1], "-f")) {
		if (argc != 3) {
			fprintf(stderr, "synthlaunch: -f takes one plan file\n");
			return 2;
		}
		return run_plan_file(argv[2]) ? 1 : 0;
	}
	for (int i = 1; i < argc; i++)
		if (checked_step(argv[i]))
			return 1;
	return 0;
}
