"""The replayer's record of when the released app waited on the disk (replayer/appwatch.c,
docs/replayer.md "When the app waited"), against the app's own clock, on the emulated 7200 rpm
disk: reads of pages the schedule fetched cost the app nothing, reads of pages it left out are
waits, charged to the part of the replay running then."""

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import require
from replay_helpers import KIB, REPLAY, build, evict, run_replayer, without_reclaim
from warmstart.db import open_db

MIB = 1024 * KIB

# The app: after the replay (it is not held: it sleeps first), reads
# all of argv[1] (scheduled), then 12 pages of argv[2] (not scheduled) spread over 24 MiB, each a
# seek on the emulated disk; prints how long each part took, by its own clock, and how many pages
# of argv[1] the kernel had reclaimed by then (cachestat's evicted count: shadow entries, which
# its read turns back into pages).
IMPORTS = "import ctypes, json, os, sys, time"
APP = IMPORTS + r"""
time.sleep(0.6)
def reclaimed(path):
    st, fd = (ctypes.c_uint64 * 5)(), os.open(path, os.O_RDONLY)
    if ctypes.CDLL(None, use_errno=True).syscall(451, fd, (ctypes.c_uint64 * 2)(0, 0), st, 0) < 0:
        raise OSError(ctypes.get_errno(), "cachestat")
    os.close(fd)
    return st[3]
def timed(f):
    t = time.monotonic(); f(); return time.monotonic() - t
def read_all():
    with open(sys.argv[1], "rb") as f:
        while f.read(1 << 20):
            pass
def read_spread():
    fd = os.open(sys.argv[2], os.O_RDONLY)
    os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_RANDOM)
    for k in range(12):
        os.pread(fd, 4096, (k * 2 + 1) << 20)
    os.close(fd)
taken = reclaimed(sys.argv[1])
print(json.dumps({"reclaimed": taken, "scheduled_s": timed(read_all), "unscheduled_s": timed(read_spread)}))
"""


def _file(path, size: int, byte: int) -> str:
    with open(path, "wb") as f:
        for _ in range(size // MIB):
            f.write(bytes([byte]) * MIB)
    return str(path)


def _launch(export, sched: str, other: str, who: str):
    """One replay beside the app, from both files evicted: (the app's own times, app_wait)."""
    evict(sched)
    evict(other)
    argv = [sys.executable, "-c", APP, sched, other]
    # the interpreter's (and the shell's) own files cached first: an earlier test's cache drop
    # would make the app's start wait on the disk after the release, which its clock does not see
    subprocess.run(["sh", "-c", '"$@"', "sh", sys.executable, "-c", IMPORTS], check=True)
    if who == "child":
        # (started after the replayer, as a held app starts all its processes)
        argv = ["sh", "-c", 'sleep 0.3; "$@"; true', "sh"] + argv
    app = subprocess.Popen(argv, stdout=subprocess.PIPE)
    try:
        rc, st, err = run_replayer(export, "--mode", "reorder", "--pid", str(app.pid),
                                   "--judge-at-exit", "20")
    finally:
        out, _ = app.communicate(timeout=60)
    assert rc == 0 and app.returncode == 0, err
    own, w = json.loads(out), st["app_wait"]
    print(f"\napp wait ({who}): by the app's clock scheduled {own['scheduled_s'] * 1e3:.1f} ms "
          f"({own['reclaimed']} pages reclaimed before), unscheduled {own['unscheduled_s'] * 1e3:.1f} ms; counted {w['waited_ns'] / 1e6:.1f} ms in {w['samples']} looks ({w['late_samples']} late, {w['late_wait_ns'] / 1e6:.1f} ms of them uncounted), {w['wchan']}, max interval {w['max_interval_ns'] / 1e6:.1f} ms, cpu per look {w['cpu_ns'] / w['samples'] / 1e3:.0f} us")
    return own, w


@pytest.mark.parametrize("who", ["app", "child"])
def test_the_replayer_reports_how_long_the_released_app_waited_and_where(emu_hdd, tmp_path, who):
    """who: the app reads itself, or a process it starts does (a shell that runs it and waits:
    the shell sleeps, S, while its child waits on the disk)."""
    require(REPLAY.exists(), "build/warmstart-replay missing: run `make binaries`")
    base = emu_hdd.mountpoint / f"app-wait-{os.getpid()}-{tmp_path.name}"
    base.mkdir()
    try:
        sched, other = _file(base / "scheduled", 4 * MIB, 65), _file(base / "other", 24 * MIB, 66)
        os.sync()
        conn = open_db(tmp_path / "db")
        export = build(conn, [sched], [[(0, 0, 4096)]], tmp_path)
        # run again if the kernel's proactive reclaim (README "Tests") took pages of the
        # prefetched file during the app's sleep: it then reads them back from the disk (37-48 ms
        # by its clock with all taken on purpose, 9-13 ms for 1-2 taken by kdamond; a fresh-clone
        # CI run failed with 29 ms, the same signature, its log not kept)
        own, w = without_reclaim(lambda: _launch(export, sched, other, who), [sched],
                                 taken_in=lambda got: got[0]["reclaimed"])
    finally:
        for p in base.iterdir():
            p.unlink()
        base.rmdir()
    waited_s = w["waited_ns"] / 1e9
    # the app's 12 cold reads are waits (one seek each, several ms on this disk); by its clock
    # they took unscheduled_s, of which the sampler (every 2 ms, longer where its looks' CPU is
    # over 2 % of that: max_interval_ns; each waiting look counts the time since the one before,
    # at most 5 intervals: late_wait_ns is what that left out) sees all but its error; its 0.6 s
    # sleep (S) counts nothing
    assert own["unscheduled_s"] > 0.03, own
    assert own["scheduled_s"] < 0.25 * own["unscheduled_s"], own      # prefetched: no seek
    assert 0.85 * own["unscheduled_s"] - 0.005 <= waited_s <= own["unscheduled_s"] + own["scheduled_s"] + 0.01, (w, own)
    # the replay was over by then: charged after it, none to its one segment
    assert w["after_ns"] == w["waited_ns"] and w["segments_ns"] == [0], w
    assert w["procs_seen"] >= 2 if who == "child" else w["procs_seen"] == 1, w   # (sh's `sleep` too, if started after)
    named = {k: v for k, v in w["wchan"].items() if k != "other"}
    assert sum(named.values()) + w["wchan"]["other"] == w["waiting_samples"], w
    assert named, w                                    # where it waited: a kernel function


def test_the_watch_runs_beside_the_replayer_which_stays_one_thread(tmp_path):
    """The watch samples from a process of its own: with a second thread in the replayer, even
    one asleep throughout, its fetch ran slower (docs/replayer.md, "When the app waited"). While
    the replayer waits for the app's exit: one thread, and the watch its child, a process that is
    gone with the replay; its looks reached the report."""
    require(REPLAY.exists(), "build/warmstart-replay missing: run `make binaries`")
    f = _file(tmp_path / "data", MIB, 67)
    conn = open_db(tmp_path / "db")
    export = build(conn, [f], [[(0, 0, 1024)]], tmp_path)   # KiB
    app = subprocess.Popen(["sleep", "1.5"])
    r, w = os.pipe()
    rp = subprocess.Popen([str(REPLAY), "--stats-fd", str(w), "--mode", "reorder", "--pid", str(app.pid),
                           "--judge-at-exit", "20", os.fsdecode(export)], pass_fds=(w,), stderr=subprocess.PIPE)
    os.close(w)
    try:
        time.sleep(0.7)   # the replay of 1 MiB is done; the replayer waits for the app's exit
        status = Path(f"/proc/{rp.pid}/status").read_text()
        threads = int(status.split("Threads:")[1].split()[0])
        children = Path(f"/proc/{rp.pid}/task/{rp.pid}/children").read_text().split()
        kids = [Path(f"/proc/{c}/comm").read_text().strip() for c in children]
    finally:
        app.wait(timeout=30)
        _, err = rp.communicate(timeout=60)
    with os.fdopen(r, "rb") as fh:
        st = json.loads(fh.read())
    assert threads == 1, status
    assert kids == ["warmstart-repla"], (children, kids)
    assert rp.returncode == 0, err
    assert st["app_wait"]["samples"] >= 50, st["app_wait"]   # released at once: ~1.5 s of looks, every 10 ms at least
    assert not os.path.exists(f"/proc/{children[0]}"), "the watch outlived the replayer"


SPIN = r"""
import json, time
time.sleep(0.3)
w, c = time.monotonic(), time.process_time()
while time.process_time() - c < 0.2:
    pass
w, c = time.monotonic() - w, time.process_time() - c
delay = int(open("/proc/self/schedstat").read().split()[1]) / 1e9
print(json.dumps({"spin_wall_s": w, "spin_cpu_s": c, "run_delay_s": delay}))
"""


def test_the_watch_counts_the_time_the_app_waited_for_a_cpu(tmp_path):
    """runq_ns: the app's tasks' run delays (schedstat), the time it was runnable and waited for
    a CPU. The app spins 0.2 s of CPU on CPU 0 while another process spins there too: it waits
    about as long as it runs (over 60 % of it), by its own clock (wall - CPU of the spin) and by
    its own schedstat before its exit; the watch counts at least that and no more than the app's whole
    life's wall time less its CPU time and its 0.3 s sleep. And the app's CPU time (app_cpu_ns),
    within what it ran after the watch's last look of its CPU time by wait4."""
    require(REPLAY.exists(), "build/warmstart-replay missing: run `make binaries`")
    require(os.path.exists("/proc/self/schedstat"), "needs /proc/PID/schedstat (CONFIG_SCHED_INFO)")
    f = _file(tmp_path / "data", MIB, 68)
    conn = open_db(tmp_path / "db")
    export = build(conn, [f], [[(0, 0, 64)]], tmp_path)   # KiB
    pin = lambda: os.sched_setaffinity(0, {0})   # noqa: E731
    rival = subprocess.Popen([sys.executable, "-c", "while True: pass"], preexec_fn=pin)
    try:
        t0 = time.monotonic()
        app = subprocess.Popen([sys.executable, "-c", SPIN], stdout=subprocess.PIPE, preexec_fn=pin)
        try:
            rc, st, err = run_replayer(export, "--mode", "reorder", "--pid", str(app.pid), "--judge-at-exit", "20")
        finally:
            out = app.stdout.read()
            _, status, ru = os.wait4(app.pid, 0)
            life = time.monotonic() - t0
            app.returncode = os.waitstatus_to_exitcode(status)
    finally:
        rival.kill()
        rival.wait()
    assert rc == 0 and app.returncode == 0, err
    own, w = json.loads(out), st["app_wait"]
    runq = w["runq_ns"] / 1e9
    print(f"\nrun delay: the app's own {own['run_delay_s'] * 1e3:.0f} ms (spin: wall {own['spin_wall_s'] * 1e3:.0f} ms, "
          f"CPU {own['spin_cpu_s'] * 1e3:.0f} ms); the watch's {runq * 1e3:.0f} ms over {w['runq_tasks']} task(s), "
          f"{w['samples']} looks")
    waited_for_cpu = own["spin_wall_s"] - own["spin_cpu_s"]
    assert waited_for_cpu > 0.12, own                      # the rival took CPU 0 about half the time
    assert own["run_delay_s"] >= 0.9 * waited_for_cpu, own
    most = life - (ru.ru_utime + ru.ru_stime) - 0.3
    assert w["runq_tasks"] == 1 and not w["runq_full"] and own["run_delay_s"] - 0.01 <= runq <= most, (w, own, most)
    # app_cpu_ns: its CPU time as the watch last saw it, short by what it ran after that last look
    # (its print and exit), never more than its whole CPU time by wait4
    cpu, seen = ru.ru_utime + ru.ru_stime, w["app_cpu_ns"] / 1e9
    print(f"CPU: the watch's {seen * 1e3:.1f} ms, wait4's {cpu * 1e3:.1f} ms")
    assert cpu - 0.03 <= seen <= cpu + 0.002, (seen, cpu, w)


def test_the_watch_keeps_the_run_delays_of_256_tasks_and_says_when_there_were_more(tmp_path):
    """An app of 300 threads (each asleep for a second): the watch counts 256 of them, each once
    however many looks saw it, and marks its run delay a lower bound (runq_full)."""
    require(REPLAY.exists(), "build/warmstart-replay missing: run `make binaries`")
    f = _file(tmp_path / "data", MIB, 69)
    conn = open_db(tmp_path / "db")
    export = build(conn, [f], [[(0, 0, 64)]], tmp_path)   # KiB
    app = subprocess.Popen([sys.executable, "-c", "import threading, time\n"
                            "ts = [threading.Thread(target=time.sleep, args=(1.0,)) for _ in range(300)]\n"
                            "[t.start() for t in ts]\n[t.join() for t in ts]"])
    try:
        rc, st, err = run_replayer(export, "--mode", "reorder", "--pid", str(app.pid), "--judge-at-exit", "20")
    finally:
        app.wait(timeout=60)
    assert rc == 0 and app.returncode == 0, err
    w = st["app_wait"]
    assert w["samples"] >= 3 and w["runq_tasks"] == 256 and w["runq_full"], w
