/* warmstart-execbench: fork+exec a program N times and print the median, p10 and p90 of the
 * fork-to-exit time in microseconds as JSON. Used to measure what warmstartd adds to an exec.
 * usage: warmstart-execbench N PROGRAM [ARGS...] */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static double now_us(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1e6 + ts.tv_nsec / 1e3;
}

static int cmp(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return x < y ? -1 : x > y;
}

int main(int argc, char **argv)
{
	extern char **environ;
	double *t;
	int n, failures = 0;

	if (argc < 3 || (n = atoi(argv[1])) <= 0) {
		fprintf(stderr, "usage: warmstart-execbench N PROGRAM [ARGS...]\n"
				"example: warmstart-execbench 2000 /bin/true\n");
		return 2;
	}
	t = calloc(n, sizeof(*t));
	if (!t)
		return 1;
	for (int i = 0; i < n; i++) {
		double t0 = now_us();
		int status;
		pid_t pid = fork();

		if (pid < 0) {
			perror("fork");
			free(t);
			return 1;
		}
		if (pid == 0) {
			execve(argv[2], argv + 2, environ);
			_exit(127);
		}
		if (waitpid(pid, &status, 0) < 0 || !WIFEXITED(status) || WEXITSTATUS(status) != 0)
			failures++;
		t[i] = now_us() - t0;
	}
	qsort(t, n, sizeof(*t), cmp);
	printf("{\"n\": %d, \"failures\": %d, \"median_us\": %.1f, \"p10_us\": %.1f, \"p90_us\": %.1f}\n", n,
	       failures, t[n / 2], t[n / 10], t[(n * 9) / 10]);
	free(t);
	return failures ? 1 : 0;
}
