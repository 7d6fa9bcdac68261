"""Whether a process we started or named in a pidfile still runs: the one test every stop and
clean-up uses.

A process that has exited but not been reaped (a zombie) does not run, though /proc still lists
it and kill(pid, 0) succeeds: a daemon started with its own session is reaped by PID 1, which in a
container or sandbox may take a second or more; waiting for /proc to forget it would make every
stop wait that long.
"""

import os
from typing import Optional, Union


def running(pid: Optional[int], cmdline_contains: Union[str, bytes] = b"", reap: bool = False,
            comm_prefix: Union[str, bytes] = b"") -> bool:
    """True if pid runs (not a zombie), its command line contains cmdline_contains and its name
    (comm) starts with comm_prefix (a reused pid is not ours). reap: if pid is our exited child,
    collect its exit status so no zombie stays behind (only for a process nothing else waits for:
    a Popen waiting on it would then see 0)."""
    if not pid:
        return False
    if reap:
        try:
            os.waitpid(pid, os.WNOHANG)
        except ChildProcessError:
            pass
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()        # "pid (comm) state ..."
        comm, rest = stat[stat.index(b"(") + 1:].rsplit(b")", 1)
        if rest.split()[0] in (b"Z", b"X") or not comm.startswith(os.fsencode(comm_prefix)):
            return False
        if not cmdline_contains:
            return True
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return os.fsencode(cmdline_contains) in f.read()
    except (OSError, ValueError, IndexError):
        return False
