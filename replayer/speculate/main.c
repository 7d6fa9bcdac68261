/* ws-spec-run: start a speculative copy of CMD in a sandbox and prefetch what it opens.
 *
 *   ws-spec-run [--root DIR] [--cwd DIR] [--ra-max BYTES] [--budget BYTES] [--data-max BYTES]
 *               [--tmpfs-mb N] [--workers N] [--no-notify] [--io-idle] [--copy-output FILE]
 *               -- CMD [ARGS...]
 *
 * Processes: this supervisor (host namespaces) -> init of new pid/mount/net/ipc/uts namespaces
 * (builds the read-only mount tree, reaps) -> the copy (restricted, seccomp-filtered, exec CMD).
 * The supervisor's death kills init (PDEATHSIG), and init's death kills every process of the
 * copy's pid namespace: the copy cannot outlive its supervisor. Exit status: the copy's.
 * stdout: "O ..." per prefetched file (see notify.c), "T ..." totals, "X <status>" at the end. */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "spec.h"

extern char **environ;

static void die(const char *what, int err)
{
	fprintf(stderr, "ws-spec-run: %s: %s\n", what, strerror(err));
	_exit(125);
}

/* The copy: restrict, filter, hand the listener to the supervisor, exec. */
static void run_copy(const struct spec_opts *o, int sock, int outfd)
{
	int r, listener = -1;
	int devnull = open("/dev/null", O_RDWR | O_CLOEXEC);
	if (devnull < 0)
		die("open /dev/null", errno);
	if ((r = sandbox_restrict_process(o)))
		die("restricting the copy", -r);
	if ((r = filter_install(o->notify, &listener)))
		die("installing the seccomp filter", -r);
	if (o->notify && (r = fd_send(sock, listener)))
		die("passing the seccomp listener", -r);
	if (listener >= 0)
		close(listener);
	if ((r = filter_seal()))
		die("installing the second seccomp filter", -r);
	if (dup2(devnull, 0) < 0 || dup2(outfd, 1) < 0 || dup2(outfd, 2) < 0)
		die("dup2", errno);
	/* Nothing else of the supervisor's (sockets, pipes, its stdout) reaches the copy. */
	syscall(SYS_close_range, 3, ~0U, 0);
	execvpe(o->argv[0], o->argv, o->envp);
	die(o->argv[0], errno);
}

/* pid 1 of the copy's namespaces. */
static int run_init(const struct spec_opts *o, int sock, int outfd, int gofd)
{
	char go;
	prctl(PR_SET_PDEATHSIG, SIGKILL);
	/* The supervisor may have died before PDEATHSIG was armed: then the pipe reads EOF. */
	if (read(gofd, &go, 1) != 1)
		_exit(125);
	close(gofd);
	int r = sandbox_mounts(o);
	if (r)
		die("building the sandbox mounts", -r);
	pid_t copy = fork();
	if (copy < 0)
		die("fork", errno);
	if (copy == 0)
		run_copy(o, sock, outfd);
	close(sock);
	close(outfd);
	/* Reap everything; when the copy's main process ends, end the namespace (and its orphans). */
	for (;;) {
		int st;
		pid_t p = wait(&st);
		if (p < 0 && errno == EINTR)
			continue;
		if (p < 0)
			_exit(125);
		if (p == copy)
			_exit(WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st));
	}
}

static uint64_t num(const char *s)
{
	char *end;
	errno = 0;
	unsigned long long v = strtoull(s, &end, 10);
	if (errno || *end || end == s) {
		fprintf(stderr, "ws-spec-run: bad number %s\n", s);
		exit(2);
	}
	return v;
}

static volatile sig_atomic_t g_init_pid;

static void on_term(int sig)
{
	(void)sig;
	if (g_init_pid > 0)
		kill(g_init_pid, SIGKILL);
}

/* Fills *o from argv. Returns -1 to go on, or the exit code (help, bad usage). */
static int parse_options(int argc, char **argv, struct spec_opts *o)
{
	static const struct option opts[] = {
		{ "root", required_argument, 0, 'r' }, { "cwd", required_argument, 0, 'c' },
		{ "ra-max", required_argument, 0, 'a' }, { "budget", required_argument, 0, 'b' },
		{ "data-max", required_argument, 0, 'd' }, { "tmpfs-mb", required_argument, 0, 't' },
		{ "workers", required_argument, 0, 'w' }, { "no-notify", no_argument, 0, 'N' },
		{ "io-idle", no_argument, 0, 'I' }, { "copy-output", required_argument, 0, 'o' },
		{ "help", no_argument, 0, 'h' }, { 0, 0, 0, 0 },
	};
	int c;
	while ((c = getopt_long(argc, argv, "+h", opts, NULL)) != -1) {
		switch (c) {
		case 'r': o->root = optarg; break;
		case 'c': o->cwd = optarg; break;
		case 'a': o->ra_max = num(optarg); break;
		case 'b': o->budget = num(optarg); break;
		case 'd': o->data_max = num(optarg); break;
		case 't': o->tmpfs_mb = (unsigned)num(optarg); break;
		case 'w': o->workers = (int)num(optarg); break;
		case 'N': o->notify = 0; break;
		case 'I': o->io_idle = 1; break;
		case 'o': o->copy_output = optarg; break;
		default:
			fprintf(stderr, "usage: ws-spec-run [--root DIR] [--cwd DIR] [--ra-max B] [--budget B] "
				"[--data-max B] [--tmpfs-mb N] [--workers N] [--no-notify] [--io-idle] "
				"[--copy-output FILE] -- CMD [ARGS...]\n");
			return c == 'h' ? 0 : 2;
		}
	}
	if (optind >= argc) {
		fprintf(stderr, "ws-spec-run: no command given (ws-spec-run [options] -- CMD ...)\n");
		return 2;
	}
	o->argv = argv + optind;
	return -1;
}

/* Clone init into new namespaces and let it go (the copy's output goes to --copy-output).
 * Returns init's host pid; *sock is the supervisor's end of the socket init's copy sends its
 * seccomp listener through. Dies on failure. */
static pid_t start_init(const struct spec_opts *o, int *sock)
{
	int outfd = open(o->copy_output ? o->copy_output : "/dev/null",
			 O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0600);
	if (outfd < 0)
		die(o->copy_output ? o->copy_output : "/dev/null", errno);
	int sv[2], go[2];
	if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) < 0 || pipe2(go, O_CLOEXEC) < 0)
		die("socketpair/pipe", errno);
	struct sigaction sa = { .sa_handler = on_term };
	sigaction(SIGTERM, &sa, NULL);
	sigaction(SIGINT, &sa, NULL);
	sigaction(SIGHUP, &sa, NULL);

	fflush(stdout);
	pid_t init = (pid_t)syscall(SYS_clone, CLONE_NEWNS | CLONE_NEWPID | CLONE_NEWNET | CLONE_NEWIPC |
				    CLONE_NEWUTS | SIGCHLD, NULL, NULL, NULL, NULL);
	if (init < 0)
		die("clone (new namespaces; needs root)", errno);
	if (init == 0) {
		close(sv[0]);
		close(go[1]);
		_exit(run_init(o, sv[1], outfd, go[0]));
	}
	g_init_pid = init;
	close(sv[1]);
	close(go[0]);
	close(outfd);
	if (write(go[1], "g", 1) != 1)
		die("starting the copy", errno);
	close(go[1]);
	*sock = sv[0];
	return init;
}

int main(int argc, char **argv)
{
	struct spec_opts o = {
		.root = "/", .cwd = NULL, .copy_output = NULL, .ra_max = 1ULL << 20,
		.budget = 512ULL << 20, .data_max = 2ULL << 30, .tmpfs_mb = 64, .workers = 4,
		.notify = 1, .io_idle = 0, .envp = environ,
	};
	int sock, ex = parse_options(argc, argv, &o);
	if (ex >= 0)
		return ex;
	pid_t init = start_init(&o, &sock);
	printf("P %d\n", init);  /* host pid of the namespace's init: the handle to freeze or kill it */
	fflush(stdout);

	int rc = 0;
	if (o.notify) {
		int listener;
		rc = fd_recv(sock, &listener);
		if (rc == 0) {
			rc = notify_serve(listener, init, &o);
			close(listener);
		}
	}
	close(sock);
	int st = 0;
	while (waitpid(init, &st, 0) < 0 && errno == EINTR)
		;
	int status = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
	printf("X %d\n", status);
	fflush(stdout);
	if (rc && rc != -EPIPE)
		fprintf(stderr, "ws-spec-run: supervisor: %s\n", strerror(-rc));
	return status;
}
