/* What the daemon learns about the process behind an exec permission event. */
#ifndef WS_PROCINFO_H
#define WS_PROCINFO_H

#include <stdint.h>
#include <sys/types.h>

#define WS_ARGV_MAX 64
#define WS_ARGV_BYTES 8192
/* how long ws_exec_argv waits for the exec'ing task to go to sleep on its permission event */
#define WS_EXEC_ARGV_WAIT_US 20000

struct ws_argv {
	int argc;
	char *argv[WS_ARGV_MAX + 1];
	char buf[WS_ARGV_BYTES];
};

/* The argv the process passed to the execve/execveat it is blocked in. At exec-open time
 * /proc/<pid>/cmdline still shows the OLD program's arguments (the new mm is not installed
 * yet), so read the syscall's argv pointer from /proc/<pid>/syscall and the strings from the
 * old mm with process_vm_readv. Returns 0 or -errno (-ENOEXEC: not in execve; -EAGAIN: the task
 * was still on the CPU after WS_EXEC_ARGV_WAIT_US). */
int ws_exec_argv(pid_t pid, struct ws_argv *out);

/* /proc/<pid>/cmdline split into argv (what the kernel shows right now). */
int ws_proc_cmdline(pid_t pid, struct ws_argv *out);

/* Real uid/gid of pid: the launching user the replayer acts for. */
int ws_proc_ids(pid_t pid, uid_t *uid, gid_t *gid);

/* When pid started (/proc/<pid>/stat field 22, clock ticks since boot); exec keeps it, a reused
 * pid does not. 0 if unknown. */
uint64_t ws_proc_starttime(pid_t pid);

#endif
