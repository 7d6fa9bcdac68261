"""The replayer's record of when the released app waited on the disk (replayer/appwatch.c,
docs/replayer.md "When the app waited"), against the app's own clock, on the emulated 7200 rpm
disk: reads of pages the schedule fetched cost the app nothing, reads of pages it left out are
waits, charged to the part of the replay running then."""

import json
import os
import subprocess
import sys

import pytest

from conftest import require
from replay_helpers import KIB, REPLAY, build, evict, run_replayer
from warmstart.db import open_db

MIB = 1024 * KIB

# The app: after the replay (it is not held: it sleeps first), reads
# all of argv[1] (scheduled), then 12 pages of argv[2] (not scheduled) spread over 24 MiB, each a
# seek on the emulated disk; prints how long each part took, by its own clock.
IMPORTS = "import json, os, sys, time"
APP = IMPORTS + r"""
time.sleep(0.6)
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
print(json.dumps({"scheduled_s": timed(read_all), "unscheduled_s": timed(read_spread)}))
"""


def _file(path, size: int, byte: int) -> str:
    with open(path, "wb") as f:
        for _ in range(size // MIB):
            f.write(bytes([byte]) * MIB)
    return str(path)


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
        own = json.loads(out)
        w = st["app_wait"]
    finally:
        for p in base.iterdir():
            p.unlink()
        base.rmdir()
    waited_s = w["waited_ns"] / 1e9
    # the app's 12 cold reads are waits (one seek each, several ms on this disk); by its clock
    # they took unscheduled_s, of which the sampler (every 2 ms; each waiting look counts the
    # time since the one before, so a busy machine's late looks lose nothing) sees all but its
    # error; its 0.6 s sleep (S) counts nothing
    assert own["unscheduled_s"] > 0.03, own
    assert own["scheduled_s"] < 0.25 * own["unscheduled_s"], own      # prefetched: no seek
    assert 0.85 * own["unscheduled_s"] - 0.005 <= waited_s <= own["unscheduled_s"] + own["scheduled_s"] + 0.01, (w, own)
    # the replay was over by then: charged after it, none to its one segment
    assert w["after_ns"] == w["waited_ns"] and w["segments_ns"] == [0], w
    assert w["procs_seen"] >= 2 if who == "child" else w["procs_seen"] == 1, w   # (sh's `sleep` too, if started after)
    named = {k: v for k, v in w["wchan"].items() if k != "other"}
    assert sum(named.values()) + w["wchan"]["other"] == w["waiting_samples"], w
    assert named, w                                    # where it waited: a kernel function
