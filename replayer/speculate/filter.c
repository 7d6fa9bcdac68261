/* The copy's seccomp filter: calls that could reach outside the sandbox are refused, calls that
 * would only change its own scheduling are faked as successful, opens are reported to the
 * supervisor (user notification) so it can prefetch the file. */
#include <errno.h>
#include <linux/audit.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <stddef.h>
#include <sys/ioctl.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "spec.h"

#define ARCH_NR AUDIT_ARCH_X86_64
#define X32_BIT 0x40000000

#define LD_NR BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr))
#define LD_ARG_LO(i) BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, args[i]))
#define LD_ARG_HI(i) BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, args[i]) + 4)
#define RET(v) BPF_STMT(BPF_RET | BPF_K, (v))
/* if nr == n: return v */
#define ON(n, v) BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, (n), 0, 1), RET(v)

#define DENY(e) (SECCOMP_RET_ERRNO | ((e) & SECCOMP_RET_DATA))
#define FAKE_OK (SECCOMP_RET_ERRNO | 0)

/* Over 80 lines on purpose: one BPF program listed instruction by instruction; its jump offsets
 * count instructions, so it reads (and is reviewed) best whole, in one place. */
int filter_install(int notify, int *listener)
{
	unsigned open_action = notify ? SECCOMP_RET_USER_NOTIF : SECCOMP_RET_ALLOW;
	struct sock_filter prog[] = {
		/* Only the native ABI: x32 and i386 entry points would bypass the numbers below. */
		BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, arch)),
		BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, ARCH_NR, 1, 0),
		RET(SECCOMP_RET_KILL_PROCESS),
		LD_NR,
		BPF_JUMP(BPF_JMP | BPF_JGE | BPF_K, X32_BIT, 0, 1),
		RET(SECCOMP_RET_KILL_PROCESS),

		/* opens: reported, then continued (the supervisor prefetches the file) */
		ON(__NR_open, open_action),
		ON(__NR_openat, open_action),
		ON(__NR_openat2, DENY(ENOSYS)),  /* its struct is not inspected: libc falls back to openat */

		/* reaching other processes */
		ON(__NR_ptrace, DENY(EPERM)),
		ON(__NR_process_vm_readv, DENY(EPERM)),
		ON(__NR_process_vm_writev, DENY(EPERM)),
		ON(__NR_process_madvise, DENY(EPERM)),
		ON(__NR_pidfd_getfd, DENY(EPERM)),
		ON(__NR_kcmp, DENY(EPERM)),
		ON(__NR_migrate_pages, DENY(EPERM)),
		ON(__NR_move_pages, DENY(EPERM)),

		/* the network: the net namespace is empty; unix sockets by path cross it */
		ON(__NR_connect, DENY(ECONNREFUSED)),
		/* sendmsg/sendmmsg: refused by filter_seal(), after the listener fd has been sent */

		/* mounts, namespaces, the kernel, time, keys */
		ON(__NR_mount, DENY(EPERM)), ON(__NR_umount2, DENY(EPERM)),
		ON(__NR_pivot_root, DENY(EPERM)), ON(__NR_chroot, DENY(EPERM)),
		ON(__NR_mount_setattr, DENY(EPERM)), ON(__NR_move_mount, DENY(EPERM)),
		ON(__NR_open_tree, DENY(EPERM)), ON(__NR_fsopen, DENY(EPERM)),
		ON(__NR_fsconfig, DENY(EPERM)), ON(__NR_fsmount, DENY(EPERM)),
		ON(__NR_fspick, DENY(EPERM)), ON(__NR_setns, DENY(EPERM)),
		ON(__NR_unshare, DENY(EPERM)), ON(__NR_swapon, DENY(EPERM)),
		ON(__NR_swapoff, DENY(EPERM)), ON(__NR_reboot, DENY(EPERM)),
		ON(__NR_kexec_load, DENY(EPERM)), ON(__NR_kexec_file_load, DENY(EPERM)),
		ON(__NR_init_module, DENY(EPERM)), ON(__NR_finit_module, DENY(EPERM)),
		ON(__NR_delete_module, DENY(EPERM)), ON(__NR_acct, DENY(EPERM)),
		ON(__NR_quotactl, DENY(EPERM)), ON(__NR_syslog, DENY(EPERM)),
		ON(__NR_vhangup, DENY(EPERM)), ON(__NR_iopl, DENY(EPERM)),
		ON(__NR_ioperm, DENY(EPERM)), ON(__NR_settimeofday, DENY(EPERM)),
		ON(__NR_clock_settime, DENY(EPERM)), ON(__NR_clock_adjtime, DENY(EPERM)),
		ON(__NR_adjtimex, DENY(EPERM)), ON(__NR_sethostname, DENY(EPERM)),
		ON(__NR_setdomainname, DENY(EPERM)), ON(__NR_bpf, DENY(EPERM)),
		ON(__NR_perf_event_open, DENY(EPERM)), ON(__NR_userfaultfd, DENY(EPERM)),
		ON(__NR_fanotify_init, DENY(EPERM)), ON(__NR_open_by_handle_at, DENY(EPERM)),
		ON(__NR_keyctl, DENY(EPERM)), ON(__NR_add_key, DENY(EPERM)),
		ON(__NR_request_key, DENY(EPERM)), ON(__NR_uselib, DENY(EPERM)),
		/* io_uring would run openat/connect/sendmsg past this filter */
		ON(__NR_io_uring_setup, DENY(ENOSYS)), ON(__NR_io_uring_enter, DENY(ENOSYS)),
		ON(__NR_io_uring_register, DENY(ENOSYS)),

		/* leaving idle priority: pretend it worked */
		ON(__NR_ioprio_set, FAKE_OK), ON(__NR_setpriority, FAKE_OK),
		ON(__NR_sched_setscheduler, FAKE_OK), ON(__NR_sched_setattr, FAKE_OK),
		ON(__NR_sched_setparam, FAKE_OK),

		/* socket(): no netlink (some families are not per-namespace), no raw packets */
		BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_socket, 0, 5),
		LD_ARG_LO(0),
		BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, AF_NETLINK, 1, 0),
		BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, AF_PACKET, 0, 1),
		RET(DENY(EAFNOSUPPORT)),
		RET(SECCOMP_RET_ALLOW),

		/* sendto() only without a destination address (connected socketpairs) */
		LD_NR,
		BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_sendto, 0, 6),
		LD_ARG_LO(4),
		BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, 0, 0, 3),
		LD_ARG_HI(4),
		BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, 0, 0, 1),
		RET(SECCOMP_RET_ALLOW),
		RET(DENY(EPERM)),

		/* ioctl(): no terminal injection or line-discipline changes */
		LD_NR,
		BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_ioctl, 0, 5),
		LD_ARG_LO(1),
		BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, TIOCSTI, 2, 0),
		BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, TIOCLINUX, 1, 0),
		BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, TIOCSETD, 0, 1),
		RET(DENY(EPERM)),

		RET(SECCOMP_RET_ALLOW),
	};
	struct sock_fprog fprog = { .len = sizeof(prog) / sizeof(prog[0]), .filter = prog };
	unsigned flags = notify ? SECCOMP_FILTER_FLAG_NEW_LISTENER : 0;
	long fd = syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, flags, &fprog);
	if (fd < 0)
		return -errno;
	*listener = notify ? (int)fd : -1;
	return 0;
}

/* Second, stacked filter, installed once the listener has been passed with sendmsg(): now
 * sendmsg and sendmmsg (which could carry an address, or fds) are refused too. */
int filter_seal(void)
{
	struct sock_filter prog[] = {
		BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, arch)),
		BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, ARCH_NR, 1, 0),
		RET(SECCOMP_RET_KILL_PROCESS),
		LD_NR,
		ON(__NR_sendmsg, DENY(EPERM)),
		ON(__NR_sendmmsg, DENY(EPERM)),
		RET(SECCOMP_RET_ALLOW),
	};
	struct sock_fprog fprog = { .len = sizeof(prog) / sizeof(prog[0]), .filter = prog };
	return syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, 0, &fprog) < 0 ? -errno : 0;
}
