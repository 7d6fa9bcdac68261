#!/usr/bin/env python3
"""Launches with the scheduled files' inodes held in memory, as warmstartd's inotify watch on each
scheduled file holds them (docs/replayer.md, "The metadata step"): records the bench's python on
a fresh emulated hdd7200 with the random-layout system image in FS, analyzes it, then alternates
segmented launches (made cold as the bench makes them: runs.cold_run) with no watch, a watch on
every scheduled file, and a watch on the files the schedule reads data of only; prints each and
the medians (launch, metadata step, pre-buffer, the app after its release).

    python3 scripts/fsmeta-bench/pinned.py --fs btrfs --reps 3 [--replayer A --replayer B]

--replayer: warmstart-replay binaries to compare (each copied over build/warmstart-replay in
turn, the build's own put back at the end); default the build's. Root; minutes the first time
(the image is built)."""

import argparse
import ctypes
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from warmstart.db import open_db                 # noqa: E402
from warmstart.db.schedules import load_active_schedule   # noqa: E402
from warmstart.emudisk.disk import EmuDisk      # noqa: E402
from runs import cold_run, print_medians        # noqa: E402

PYTHON = ["python3", "-c", "import asyncio, email.mime.multipart, http.client, xml.etree.ElementTree, decimal, "
          "unittest, logging.handlers, concurrent.futures, urllib.request, tarfile, sqlite3, argparse, json, csv, "
          "multiprocessing; print('imported 15')"]
PINS = ("none", "all", "data")


def watch(paths):
    libc = ctypes.CDLL(None, use_errno=True)
    fd = libc.inotify_init1(os.O_CLOEXEC)
    for p in paths:
        libc.inotify_add_watch(fd, p, 0x2 | 0x4)   # IN_MODIFY | IN_ATTRIB, as any
    return fd


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--fs", default="btrfs")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--replayer", action="append", default=[])
    a = ap.parse_args()
    build = REPO / "build/warmstart-replay"
    keep = Path(tempfile.mkdtemp()) / "warmstart-replay"
    shutil.copy(build, keep)
    binaries = a.replayer or [str(keep)]
    db = Path(tempfile.mkdtemp()) / "pinned.db"
    emu = EmuDisk.up(f"pinned-{a.fs}", profile="hdd7200", image="system-random", fs=a.fs, fresh=True,
                     progress=lambda m: print(m, file=sys.stderr))
    res = {}
    try:
        argv = emu.chroot_argv(PYTHON)
        ws = [sys.executable, "-m", "warmstart", "--db", str(db)]
        emu.drop_caches()
        subprocess.run(ws + ["record", "--name", "py", "--", *argv], check=True, capture_output=True)
        subprocess.run(ws + ["analyze", "py"], check=True, capture_output=True)
        sched = load_active_schedule(open_db(db), "py")
        every, data = [f.path for f in sched.files], [f.path for f in sched.read_files]
        print(f"{len(every)} scheduled files, {len(data)} with data")
        for _ in range(a.reps):
            for b in binaries:
                shutil.copy(b, str(build) + ".tmp")
                os.replace(str(build) + ".tmp", build)
                for pin in PINS:
                    fd = watch({"none": [], "all": every, "data": data}[pin])
                    try:
                        d = cold_run(emu, db, argv, name="py")
                    finally:
                        os.close(fd)
                    r = d["replay_stats"]
                    row = (d["launch_time_s"], r["t_meta_ns"] / 1e9, d["prebuffer_s"], d["app_time_s"])
                    res.setdefault(f"{b} watches={pin}", []).append(row)
                    print(f"{b} watches={pin}: launch {row[0]:.3f} s, step {row[1]:.3f}, pre-buffer {row[2]:.3f}, "
                          f"app {row[3]:.3f}", flush=True)
    finally:
        shutil.copy(keep, str(build) + ".tmp")
        os.replace(str(build) + ".tmp", build)
        emu.down()
    print_medians(f"of {a.reps} ({a.fs}, hdd7200, random layout): launch / step / pre-buffer / app after release", res)


if __name__ == "__main__":
    main()
