/* The seccomp policy of filter.c, checked call by call: each case runs in a child that installs
 * filter_install() and filter_seal() as the copy does, then makes the call and compares the
 * result with the policy (errno, faked success, or death by SIGSYS for other ABIs). Refused calls
 * get arguments the kernel itself would reject with another errno (or that do nothing), so a
 * call the filter lets through fails the check without changing the machine. */
#include <errno.h>
#include <fcntl.h>
#include <linux/seccomp.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "spec.h"

#define BAD (-1L)          /* an argument the kernel rejects: fd -1, pointer/flags all ones */
#define HIGH (1UL << 32)   /* set in the upper half of a 32-bit argument (the kernel ignores it) */
/* clone() flags the kernel rejects (EINVAL: CLONE_SIGHAND without CLONE_VM) before it makes
 * any namespace or process: a clone the filter lets through fails with EINVAL, changing nothing */
#define CLONE_INVALID (CLONE_SIGHAND | SIGCHLD)
#define FAKED 0            /* expected "errno" of a call faked as successful: it returns 0 */

struct call {
	const char *name;
	long nr, a[6];
	int expect;        /* errno, or FAKED */
};

static const struct call refused[] = {
	{ "openat2", __NR_openat2, { BAD, BAD, BAD, BAD }, ENOSYS },
	{ "ptrace", __NR_ptrace, { BAD, BAD, BAD, BAD }, EPERM },
	{ "process_vm_readv", __NR_process_vm_readv, { BAD, BAD, BAD, BAD, BAD, BAD }, EPERM },
	{ "process_vm_writev", __NR_process_vm_writev, { BAD, BAD, BAD, BAD, BAD, BAD }, EPERM },
	{ "process_madvise", __NR_process_madvise, { BAD, BAD, BAD, BAD, BAD }, EPERM },
	{ "pidfd_getfd", __NR_pidfd_getfd, { BAD, BAD, BAD }, EPERM },
	{ "kcmp", __NR_kcmp, { BAD, BAD, BAD, BAD, BAD }, EPERM },
	{ "migrate_pages", __NR_migrate_pages, { BAD, BAD, BAD, BAD }, EPERM },
	{ "move_pages", __NR_move_pages, { BAD, BAD, BAD, BAD, BAD, BAD }, EPERM },
	{ "connect", __NR_connect, { BAD, BAD, BAD }, ECONNREFUSED },
	{ "sendmsg", __NR_sendmsg, { BAD, BAD, BAD }, EPERM },
	{ "sendmmsg", __NR_sendmmsg, { BAD, BAD, BAD, BAD }, EPERM },
	{ "mount", __NR_mount, { BAD, BAD, BAD, BAD, BAD }, EPERM },
	{ "umount2", __NR_umount2, { BAD, BAD }, EPERM },
	{ "pivot_root", __NR_pivot_root, { BAD, BAD }, EPERM },
	{ "chroot", __NR_chroot, { BAD }, EPERM },
	{ "mount_setattr", __NR_mount_setattr, { BAD, BAD, BAD, BAD, BAD }, EPERM },
	{ "move_mount", __NR_move_mount, { BAD, BAD, BAD, BAD, BAD }, EPERM },
	{ "open_tree", __NR_open_tree, { BAD, BAD, BAD }, EPERM },
	{ "fsopen", __NR_fsopen, { BAD, BAD }, EPERM },
	{ "fsconfig", __NR_fsconfig, { BAD, BAD, BAD, BAD, BAD }, EPERM },
	{ "fsmount", __NR_fsmount, { BAD, BAD, BAD }, EPERM },
	{ "fspick", __NR_fspick, { BAD, BAD, BAD }, EPERM },
	{ "setns", __NR_setns, { BAD, BAD }, EPERM },
	{ "unshare", __NR_unshare, { BAD }, EPERM },
	{ "swapon", __NR_swapon, { BAD, BAD }, EPERM },
	{ "swapoff", __NR_swapoff, { BAD }, EPERM },
	{ "reboot", __NR_reboot, { BAD, BAD, BAD, BAD }, EPERM },
	{ "kexec_load", __NR_kexec_load, { BAD, BAD, BAD, BAD }, EPERM },
	{ "kexec_file_load", __NR_kexec_file_load, { BAD, BAD, BAD, BAD, BAD }, EPERM },
	{ "init_module", __NR_init_module, { BAD, BAD, BAD }, EPERM },
	{ "finit_module", __NR_finit_module, { BAD, BAD, BAD }, EPERM },
	{ "delete_module", __NR_delete_module, { BAD, BAD }, EPERM },
	{ "acct", __NR_acct, { BAD }, EPERM },
	{ "quotactl", __NR_quotactl, { BAD, BAD, BAD, BAD }, EPERM },
	{ "syslog", __NR_syslog, { BAD, BAD, BAD }, EPERM },
	{ "vhangup", __NR_vhangup, { 0 }, EPERM },  /* harmless: the child has no terminal (setsid) */
	{ "iopl", __NR_iopl, { BAD }, EPERM },
	{ "ioperm", __NR_ioperm, { BAD, BAD, BAD }, EPERM },
	{ "settimeofday", __NR_settimeofday, { BAD, BAD }, EPERM },
	{ "clock_settime", __NR_clock_settime, { BAD, BAD }, EPERM },
	{ "clock_adjtime", __NR_clock_adjtime, { BAD, BAD }, EPERM },
	{ "adjtimex", __NR_adjtimex, { BAD }, EPERM },
	{ "sethostname", __NR_sethostname, { BAD, BAD }, EPERM },
	{ "setdomainname", __NR_setdomainname, { BAD, BAD }, EPERM },
	{ "bpf", __NR_bpf, { BAD, BAD, BAD }, EPERM },
	{ "perf_event_open", __NR_perf_event_open, { BAD, BAD, BAD, BAD, BAD }, EPERM },
	{ "userfaultfd", __NR_userfaultfd, { BAD }, EPERM },
	{ "fanotify_init", __NR_fanotify_init, { BAD, BAD }, EPERM },
	{ "open_by_handle_at", __NR_open_by_handle_at, { BAD, BAD, BAD }, EPERM },
	{ "keyctl", __NR_keyctl, { BAD, BAD, BAD, BAD, BAD }, EPERM },
	{ "add_key", __NR_add_key, { BAD, BAD, BAD, BAD, BAD }, EPERM },
	{ "request_key", __NR_request_key, { BAD, BAD, BAD, BAD }, EPERM },
	{ "uselib", __NR_uselib, { BAD }, EPERM },
	{ "io_uring_setup", __NR_io_uring_setup, { BAD, BAD }, ENOSYS },
	{ "io_uring_enter", __NR_io_uring_enter, { BAD, BAD, BAD, BAD, BAD, BAD }, ENOSYS },
	{ "io_uring_register", __NR_io_uring_register, { BAD, BAD, BAD, BAD }, ENOSYS },
	{ "ioprio_set", __NR_ioprio_set, { BAD, BAD, BAD }, FAKED },
	{ "setpriority", __NR_setpriority, { BAD, BAD, BAD }, FAKED },
	{ "sched_setscheduler", __NR_sched_setscheduler, { BAD, BAD, BAD }, FAKED },
	{ "sched_setattr", __NR_sched_setattr, { BAD, BAD, BAD }, FAKED },
	{ "sched_setparam", __NR_sched_setparam, { BAD, BAD }, FAKED },
	/* argument checks; 32-bit arguments are checked on their lower half, as the kernel reads them */
	{ "socket(AF_NETLINK)", __NR_socket, { AF_NETLINK, SOCK_RAW, 0 }, EAFNOSUPPORT },
	{ "socket(AF_PACKET)", __NR_socket, { AF_PACKET, SOCK_RAW, 0 }, EAFNOSUPPORT },
	{ "socket(AF_NETLINK | high bits)", __NR_socket, { HIGH | AF_NETLINK, SOCK_RAW, 0 }, EAFNOSUPPORT },
	{ "socket(AF_PACKET | high bits)", __NR_socket, { HIGH | AF_PACKET, SOCK_RAW, 0 }, EAFNOSUPPORT },
	{ "socket(bad family)", __NR_socket, { BAD, BAD, BAD }, EINVAL },  /* passed: the kernel's own error */
	{ "sendto(address)", __NR_sendto, { BAD, BAD, BAD, BAD, 1, BAD }, EPERM },
	{ "sendto(address above 4 GiB)", __NR_sendto, { BAD, BAD, BAD, BAD, HIGH, BAD }, EPERM },
	{ "sendto(no address)", __NR_sendto, { BAD, 0, 0, 0, 0, 0 }, EBADF },
	{ "ioctl(TIOCSTI)", __NR_ioctl, { BAD, TIOCSTI, 0 }, EPERM },
	{ "ioctl(TIOCLINUX)", __NR_ioctl, { BAD, TIOCLINUX, 0 }, EPERM },
	{ "ioctl(TIOCSETD)", __NR_ioctl, { BAD, TIOCSETD, 0 }, EPERM },
	{ "ioctl(TIOCSTI | high bits)", __NR_ioctl, { BAD, HIGH | TIOCSTI, 0 }, EPERM },
	{ "ioctl(FIONREAD)", __NR_ioctl, { BAD, FIONREAD, 0 }, EBADF },
	{ "clone(CLONE_NEWUSER)", __NR_clone, { CLONE_NEWUSER | CLONE_INVALID }, EPERM },
	{ "clone(CLONE_NEWNS)", __NR_clone, { CLONE_NEWNS | CLONE_INVALID }, EPERM },
	{ "clone(CLONE_NEWNET)", __NR_clone, { CLONE_NEWNET | CLONE_INVALID }, EPERM },
	{ "clone(CLONE_NEWPID)", __NR_clone, { CLONE_NEWPID | CLONE_INVALID }, EPERM },
	{ "clone(CLONE_NEWIPC)", __NR_clone, { CLONE_NEWIPC | CLONE_INVALID }, EPERM },
	{ "clone(CLONE_NEWUTS)", __NR_clone, { CLONE_NEWUTS | CLONE_INVALID }, EPERM },
	{ "clone(CLONE_NEWCGROUP)", __NR_clone, { CLONE_NEWCGROUP | CLONE_INVALID }, EPERM },
	{ "clone(all namespaces | high bits)", __NR_clone,
	  { HIGH | CLONE_NEWUSER | CLONE_NEWNS | CLONE_NEWNET | CLONE_NEWPID | CLONE_INVALID }, EPERM },
	{ "clone(no namespace)", __NR_clone, { CLONE_INVALID }, EINVAL },  /* passed: the kernel's own error */
	{ "clone3", __NR_clone3, { BAD, BAD }, ENOSYS },
	{ "getpid + x32 bit", __NR_getpid | 0x40000000, { 0 }, -SIGSYS },
};

static int failures;

static void fail(const char *what, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	fprintf(stderr, "test-spec-filter: FAIL %s: ", what);
	vfprintf(stderr, fmt, ap);
	fputc('\n', stderr);
	va_end(ap);
	failures++;
}

/* In a child: both filters as the copy installs them (no notification), then body(arg); returns
 * the child's exit code, or -signal when it was killed. */
static int filtered(int (*body)(const void *), const void *arg)
{
	pid_t pid = fork();
	if (pid < 0) {
		perror("fork");
		exit(2);
	}
	if (pid == 0) {
		int listener;
		setsid();
		if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) || filter_install(0, &listener) || filter_seal())
			_exit(100);
		_exit(body(arg));
	}
	int status;
	if (waitpid(pid, &status, 0) < 0) {
		perror("waitpid");
		exit(2);
	}
	return WIFSIGNALED(status) ? -WTERMSIG(status) : WEXITSTATUS(status);
}

/* exit code: the errno, 0 on a return of 0, 99 on any other return */
static int make_call(const void *arg)
{
	const struct call *c = arg;
	long r = syscall(c->nr, c->a[0], c->a[1], c->a[2], c->a[3], c->a[4], c->a[5]);
	return r == 0 ? 0 : r < 0 ? errno : 99;
}

/* getpid through the i386 entry point (int 0x80; 20 is i386's getpid) */
static int i386_call(const void *arg)
{
	(void)arg;
	long r = 20;
	__asm__ volatile("int $0x80" : "+a"(r) : : "memory");
	return r > 0 ? 0 : 99;
}

/* an x32 call from a second thread: the whole process dies, not only that thread */
static void *x32_call(void *arg)
{
	(void)arg;
	syscall(__NR_getpid | 0x40000000);
	return NULL;
}

static int x32_in_thread(const void *arg)
{
	(void)arg;
	pthread_t t;
	if (pthread_create(&t, NULL, x32_call, NULL))
		return 98;
	pthread_join(t, NULL);
	return 0;
}

/* What the copy still needs: files (not notified without a listener), pipes, socketpairs. */
static int allowed_calls(const void *arg)
{
	(void)arg;
	int sv[2];
	char c;
	if (open("/dev/null", O_RDONLY) < 0 || syscall(__NR_open, "/dev/null", O_RDONLY) < 0)
		return 1;
	if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv) < 0 || send(sv[0], "x", 1, 0) != 1 ||
	    recv(sv[1], &c, 1, 0) != 1)
		return 2;
	if (socket(AF_INET, SOCK_DGRAM, 0) < 0)
		return 3;
	return 0;
}

/* With notify: open/openat become notifications on the listener; the child passes the listener
 * to this process (as the copy does), which checks the call and lets it continue. */
static void check_notify(void)
{
	int sv[2];
	if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv) < 0) {
		perror("socketpair");
		exit(2);
	}
	pid_t pid = fork();
	if (pid == 0) {
		int listener;
		close(sv[0]);
		if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) || filter_install(1, &listener) || listener < 0 ||
		    fd_send(sv[1], listener) || filter_seal())
			_exit(100);
		close(listener);
		_exit(open("/dev/null", O_RDONLY) >= 0 ? 0 : 1);
	}
	close(sv[1]);
	int listener = -1, r = fd_recv(sv[0], &listener);
	close(sv[0]);
	if (r) {
		fail("notify", "no listener received (%s)", strerror(-r));
	} else {
		struct seccomp_notif req;
		struct seccomp_notif_resp resp = { 0 };
		memset(&req, 0, sizeof(req));
		if (ioctl(listener, SECCOMP_IOCTL_NOTIF_RECV, &req) < 0) {
			fail("notify", "receive failed (%s)", strerror(errno));
		} else {
			if (req.data.nr != __NR_openat)
				fail("notify", "notified call %d, expected openat (%d)", req.data.nr, __NR_openat);
			resp.id = req.id;
			resp.flags = SECCOMP_USER_NOTIF_FLAG_CONTINUE;
			if (ioctl(listener, SECCOMP_IOCTL_NOTIF_SEND, &resp) < 0)
				fail("notify", "respond failed (%s)", strerror(errno));
		}
		close(listener);
	}
	int status;
	waitpid(pid, &status, 0);
	if (!WIFEXITED(status) || WEXITSTATUS(status))
		fail("notify", "the notified open did not succeed (wait status %#x)", status);
}

int main(void)
{
	for (size_t i = 0; i < sizeof(refused) / sizeof(refused[0]); i++) {
		int got = filtered(make_call, &refused[i]);
		if (got != refused[i].expect)
			fail(refused[i].name, "result %d, expected %d (errno, 0 = faked success, "
			     "negative = killed by that signal)", got, refused[i].expect);
	}
	int got = filtered(i386_call, NULL);
	if (got != -SIGSYS)
		fail("getpid via int 0x80 (i386)", "result %d, expected %d", got, -SIGSYS);
	if ((got = filtered(x32_in_thread, NULL)) != -SIGSYS)
		fail("x32 call in a thread", "result %d, expected the process killed (%d)", got, -SIGSYS);
	if ((got = filtered(allowed_calls, NULL)))
		fail("allowed calls", "step %d failed", got);
	check_notify();
	int cases = (int)(sizeof(refused) / sizeof(refused[0])) + 4;
	printf("test-spec-filter: %d passed, %d failed\n", cases - failures, failures);
	return failures ? 1 : 0;
}
