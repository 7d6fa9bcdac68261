/* Start warmstart-replay for one launch, with a notify pipe on fd 3. */
#include "daemon.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/types.h>
#include <unistd.h>

pid_t ws_spawn_replayer(const char *replayer, const char *schedule, uid_t uid, gid_t gid,
			pid_t app_pid, const char *stats_path, int *notify_fd)
{
	char uid_s[16], gid_s[16], pid_s[16];
	int p[2];
	pid_t pid;

	snprintf(uid_s, sizeof(uid_s), "%u", (unsigned)uid);
	snprintf(gid_s, sizeof(gid_s), "%u", (unsigned)gid);
	snprintf(pid_s, sizeof(pid_s), "%d", (int)app_pid);
	if (pipe2(p, O_CLOEXEC) < 0)
		return -errno;
	pid = fork();
	if (pid < 0) {
		int err = -errno;

		close(p[0]);
		close(p[1]);
		return err;
	}
	if (pid == 0) {
		/* child: only async-signal-safe calls until exec */
		char *const with_stats[] = {(char *)replayer, "--notify-fd", "3", "--uid", uid_s, "--gid", gid_s,
					    "--pid", pid_s, "--stats", (char *)stats_path,
					    /* the feedback's verdict is taken at the app's exit (docs/hook.md) */
					    "--judge-at-exit", WS_JUDGE_WAIT_S, (char *)schedule, NULL};
		char *const without[] = {(char *)replayer, "--notify-fd", "3", "--uid", uid_s, "--gid", gid_s,
					 (char *)schedule, NULL};
		char *const *argv = stats_path ? with_stats : without;
		char *const envp[] = {"PATH=/usr/sbin:/usr/bin:/sbin:/bin", NULL};
		sigset_t none;
		int null = open("/dev/null", O_RDWR);

		sigemptyset(&none);
		sigprocmask(SIG_SETMASK, &none, NULL);
		if (null >= 0) {
			dup2(null, 0);
			dup2(null, 1);
		}
		if (p[1] == 3 ? fcntl(3, F_SETFD, 0) < 0 : dup2(p[1], 3) < 0)
			_exit(127);
		setsid(); /* not in the daemon's process group: a signal to the daemon spares it */
		execve(replayer, argv, envp);
		_exit(127);
	}
	close(p[1]);
	*notify_fd = p[0];
	return pid;
}
