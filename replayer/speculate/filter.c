/* The copy's seccomp filter (libseccomp): calls that could reach outside the sandbox are refused,
 * calls that would only change its own scheduling are faked as successful, opens are reported to
 * the supervisor (user notification) so it can prefetch the file. The policy is checked call by
 * call by test_filter.c. */
#include <errno.h>
#include <sched.h>
#include <seccomp.h>
#include <stddef.h>
#include <sys/ioctl.h>
#include <sys/socket.h>

#include "spec.h"

#define FAKE_OK SCMP_ACT_ERRNO(0)
/* An int argument as the kernel reads it: its lower 32 bits (a 64-bit compare would let
 * AF_NETLINK | 1 << 32 through, which the kernel takes for AF_NETLINK). */
#define ARG32_IS(i, v) SCMP_CMP(i, SCMP_CMP_MASKED_EQ, 0xffffffffULL, (v))

struct rule {
	int nr;
	uint32_t action;
};

static const struct rule refused[] = {
	{ SCMP_SYS(openat2), SCMP_ACT_ERRNO(ENOSYS) },  /* its struct is not inspected: libc falls back to openat */
	/* reaching other processes */
	{ SCMP_SYS(ptrace), SCMP_ACT_ERRNO(EPERM) },
	{ SCMP_SYS(process_vm_readv), SCMP_ACT_ERRNO(EPERM) },
	{ SCMP_SYS(process_vm_writev), SCMP_ACT_ERRNO(EPERM) },
	{ SCMP_SYS(process_madvise), SCMP_ACT_ERRNO(EPERM) },
	{ SCMP_SYS(pidfd_getfd), SCMP_ACT_ERRNO(EPERM) },
	{ SCMP_SYS(kcmp), SCMP_ACT_ERRNO(EPERM) },
	{ SCMP_SYS(migrate_pages), SCMP_ACT_ERRNO(EPERM) },
	{ SCMP_SYS(move_pages), SCMP_ACT_ERRNO(EPERM) },
	/* the network: the net namespace is empty; unix sockets by path cross it */
	{ SCMP_SYS(connect), SCMP_ACT_ERRNO(ECONNREFUSED) },
	/* sendmsg/sendmmsg: refused by filter_seal(), after the listener fd has been sent */
	/* mounts, namespaces, the kernel, time, keys */
	{ SCMP_SYS(mount), SCMP_ACT_ERRNO(EPERM) }, { SCMP_SYS(umount2), SCMP_ACT_ERRNO(EPERM) },
	{ SCMP_SYS(pivot_root), SCMP_ACT_ERRNO(EPERM) }, { SCMP_SYS(chroot), SCMP_ACT_ERRNO(EPERM) },
	{ SCMP_SYS(mount_setattr), SCMP_ACT_ERRNO(EPERM) }, { SCMP_SYS(move_mount), SCMP_ACT_ERRNO(EPERM) },
	{ SCMP_SYS(open_tree), SCMP_ACT_ERRNO(EPERM) }, { SCMP_SYS(fsopen), SCMP_ACT_ERRNO(EPERM) },
	{ SCMP_SYS(fsconfig), SCMP_ACT_ERRNO(EPERM) }, { SCMP_SYS(fsmount), SCMP_ACT_ERRNO(EPERM) },
	{ SCMP_SYS(fspick), SCMP_ACT_ERRNO(EPERM) }, { SCMP_SYS(setns), SCMP_ACT_ERRNO(EPERM) },
	{ SCMP_SYS(unshare), SCMP_ACT_ERRNO(EPERM) }, { SCMP_SYS(swapon), SCMP_ACT_ERRNO(EPERM) },
	/* clone3's flags are in a struct the filter cannot read: refused as absent, libc falls back
	 * to clone, whose namespace flags are refused below (add_argument_rules) */
	{ SCMP_SYS(clone3), SCMP_ACT_ERRNO(ENOSYS) },
	{ SCMP_SYS(swapoff), SCMP_ACT_ERRNO(EPERM) }, { SCMP_SYS(reboot), SCMP_ACT_ERRNO(EPERM) },
	{ SCMP_SYS(kexec_load), SCMP_ACT_ERRNO(EPERM) }, { SCMP_SYS(kexec_file_load), SCMP_ACT_ERRNO(EPERM) },
	{ SCMP_SYS(init_module), SCMP_ACT_ERRNO(EPERM) }, { SCMP_SYS(finit_module), SCMP_ACT_ERRNO(EPERM) },
	{ SCMP_SYS(delete_module), SCMP_ACT_ERRNO(EPERM) }, { SCMP_SYS(acct), SCMP_ACT_ERRNO(EPERM) },
	{ SCMP_SYS(quotactl), SCMP_ACT_ERRNO(EPERM) }, { SCMP_SYS(syslog), SCMP_ACT_ERRNO(EPERM) },
	{ SCMP_SYS(vhangup), SCMP_ACT_ERRNO(EPERM) }, { SCMP_SYS(iopl), SCMP_ACT_ERRNO(EPERM) },
	{ SCMP_SYS(ioperm), SCMP_ACT_ERRNO(EPERM) }, { SCMP_SYS(settimeofday), SCMP_ACT_ERRNO(EPERM) },
	{ SCMP_SYS(clock_settime), SCMP_ACT_ERRNO(EPERM) }, { SCMP_SYS(clock_adjtime), SCMP_ACT_ERRNO(EPERM) },
	{ SCMP_SYS(adjtimex), SCMP_ACT_ERRNO(EPERM) }, { SCMP_SYS(sethostname), SCMP_ACT_ERRNO(EPERM) },
	{ SCMP_SYS(setdomainname), SCMP_ACT_ERRNO(EPERM) }, { SCMP_SYS(bpf), SCMP_ACT_ERRNO(EPERM) },
	{ SCMP_SYS(perf_event_open), SCMP_ACT_ERRNO(EPERM) }, { SCMP_SYS(userfaultfd), SCMP_ACT_ERRNO(EPERM) },
	{ SCMP_SYS(fanotify_init), SCMP_ACT_ERRNO(EPERM) }, { SCMP_SYS(open_by_handle_at), SCMP_ACT_ERRNO(EPERM) },
	{ SCMP_SYS(keyctl), SCMP_ACT_ERRNO(EPERM) }, { SCMP_SYS(add_key), SCMP_ACT_ERRNO(EPERM) },
	{ SCMP_SYS(request_key), SCMP_ACT_ERRNO(EPERM) }, { SCMP_SYS(uselib), SCMP_ACT_ERRNO(EPERM) },
	/* io_uring would run openat/connect/sendmsg past this filter */
	{ SCMP_SYS(io_uring_setup), SCMP_ACT_ERRNO(ENOSYS) }, { SCMP_SYS(io_uring_enter), SCMP_ACT_ERRNO(ENOSYS) },
	{ SCMP_SYS(io_uring_register), SCMP_ACT_ERRNO(ENOSYS) },
	/* leaving idle priority: pretend it worked */
	{ SCMP_SYS(ioprio_set), FAKE_OK }, { SCMP_SYS(setpriority), FAKE_OK },
	{ SCMP_SYS(sched_setscheduler), FAKE_OK }, { SCMP_SYS(sched_setattr), FAKE_OK },
	{ SCMP_SYS(sched_setparam), FAKE_OK },
};

/* A filter allowing by default, for the native ABI only: i386 and x32 entry points would bypass
 * the rules. libseccomp's x86_64 filter sends x32 numbers (nr | 0x40000000) to the bad-arch
 * action too, all but nr -1 (it does nothing: ENOSYS), which it lets through for ptracers.
 * Its default bad-arch action is KILL (the thread); the whole copy is killed instead. */
static scmp_filter_ctx filter_new(void)
{
	scmp_filter_ctx ctx = seccomp_init(SCMP_ACT_ALLOW);
	if (ctx && seccomp_attr_set(ctx, SCMP_FLTATR_ACT_BADARCH, SCMP_ACT_KILL_PROCESS)) {
		seccomp_release(ctx);
		return NULL;
	}
	return ctx;
}

/* clone() flags that make a new namespace. CLONE_NEWTIME is no clone() flag: it shares its bit
 * with the exit signal (CSIGNAL), and only clone3 and unshare take it; both are refused whole. */
static const unsigned long clone_ns[] = {
	CLONE_NEWUSER, CLONE_NEWNS, CLONE_NEWNET, CLONE_NEWPID, CLONE_NEWIPC, CLONE_NEWUTS, CLONE_NEWCGROUP,
};

/* the rules whose action depends on arguments */
static int add_argument_rules(scmp_filter_ctx ctx)
{
	int r;
	/* clone(): no new namespaces (kernel attack surface; unshare and setns are refused above) */
	for (size_t i = 0; i < sizeof(clone_ns) / sizeof(clone_ns[0]); i++)
		if ((r = seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EPERM), SCMP_SYS(clone), 1,
					  SCMP_A0(SCMP_CMP_MASKED_EQ, clone_ns[i], clone_ns[i]))))
			return r;
	/* socket(): no netlink (some families are not per-namespace), no raw packets */
	if ((r = seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EAFNOSUPPORT), SCMP_SYS(socket), 1, ARG32_IS(0, AF_NETLINK))) ||
	    (r = seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EAFNOSUPPORT), SCMP_SYS(socket), 1, ARG32_IS(0, AF_PACKET))))
		return r;
	/* sendto() only without a destination address (connected socketpairs) */
	if ((r = seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EPERM), SCMP_SYS(sendto), 1, SCMP_A4(SCMP_CMP_NE, 0))))
		return r;
	/* ioctl(): no terminal injection or line-discipline changes */
	static const unsigned long tty[] = { TIOCSTI, TIOCLINUX, TIOCSETD };
	for (size_t i = 0; i < sizeof(tty) / sizeof(tty[0]); i++)
		if ((r = seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EPERM), SCMP_SYS(ioctl), 1, ARG32_IS(1, tty[i]))))
			return r;
	return 0;
}

int filter_install(int notify, int *listener)
{
	scmp_filter_ctx ctx = filter_new();
	if (!ctx)
		return -ENOMEM;
	/* opens: reported, then continued (the supervisor prefetches the file) */
	int r = 0;
	if (notify && ((r = seccomp_rule_add(ctx, SCMP_ACT_NOTIFY, SCMP_SYS(open), 0)) ||
		       (r = seccomp_rule_add(ctx, SCMP_ACT_NOTIFY, SCMP_SYS(openat), 0))))
		goto out;
	for (size_t i = 0; i < sizeof(refused) / sizeof(refused[0]); i++)
		if ((r = seccomp_rule_add(ctx, refused[i].action, refused[i].nr, 0)))
			goto out;
	if ((r = add_argument_rules(ctx)) || (r = seccomp_load(ctx)))
		goto out;
	*listener = -1;
	if (notify && (*listener = seccomp_notify_fd(ctx)) < 0)
		r = *listener;
out:
	seccomp_release(ctx);
	return r;
}

/* Second, stacked filter, installed once the listener has been passed with sendmsg(): now
 * sendmsg and sendmmsg (which could carry an address, or fds) are refused too. */
int filter_seal(void)
{
	scmp_filter_ctx ctx = filter_new();
	if (!ctx)
		return -ENOMEM;
	int r = seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EPERM), SCMP_SYS(sendmsg), 0);
	if (!r)
		r = seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EPERM), SCMP_SYS(sendmmsg), 0);
	if (!r)
		r = seccomp_load(ctx);
	seccomp_release(ctx);
	return r;
}
