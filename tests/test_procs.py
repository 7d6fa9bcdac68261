"""procs.running: the one test every stop and clean-up uses for "does it still run"."""

import os
import subprocess
import sys
import time

from warmstart.procs import running


def test_an_exited_process_its_parent_has_not_reaped_does_not_run():
    """A daemon started in its own session is reaped by PID 1, which may take seconds in a
    container (1.4-2.2 s seen here): a stop that waited for /proc to forget the zombie waited that
    long (`hook uninstall` 1.4 s, now 0.3 s)."""
    # a parent that never reaps: it starts the child, prints its pid and sleeps
    parent = subprocess.Popen([sys.executable, "-c", "import subprocess, sys, time; "
                               "p = subprocess.Popen(['sleep', '0.2']); print(p.pid, flush=True); "
                               "time.sleep(30)"], stdout=subprocess.PIPE, text=True)
    try:
        pid = int(parent.stdout.readline())
        assert running(pid)   # (its command line may still be the parent's: sleep not yet exec'ed)
        deadline = time.monotonic() + 10
        while running(pid) and time.monotonic() < deadline:
            time.sleep(0.02)
        with open(f"/proc/{pid}/stat", "rb") as f:   # still listed, as a zombie
            assert f.read().rsplit(b")", 1)[1].split()[0] == b"Z"
        assert not running(pid) and not running(pid, "sleep")
    finally:
        parent.kill()
        parent.wait()


def test_a_reused_pid_is_not_ours_and_our_own_child_is_reaped_when_asked():
    p = subprocess.Popen(["sleep", "30"])
    try:
        # the new command line shows a moment after Popen returns (exec sets it up after it has
        # closed the descriptor Popen waits on)
        deadline = time.monotonic() + 5
        while not running(p.pid, b"sleep") and time.monotonic() < deadline:
            time.sleep(0.01)
        assert running(p.pid) and running(p.pid, b"sleep") and not running(p.pid, "hddsim")
        # by its name, as the hook service knows warmstartd (a command line may merely mention it)
        assert running(p.pid, comm_prefix="sleep") and not running(p.pid, comm_prefix="warmstartd")
    finally:
        p.kill()
    deadline = time.monotonic() + 5
    while running(p.pid) and time.monotonic() < deadline:
        time.sleep(0.01)
    assert not running(p.pid) and os.path.exists(f"/proc/{p.pid}")   # a zombie: not reaped unless asked
    assert not running(p.pid, reap=True) and not os.path.exists(f"/proc/{p.pid}")
    assert not running(None) and not running(0)
