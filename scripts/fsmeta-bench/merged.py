#!/usr/bin/env python3
"""XFS: the metadata step as a pass of its own before the data sweep (what the replayer does)
against one sweep that takes each lookup at the disk address it reads, between the data reads
around it (docs/replayer.md, "Tried and not kept"). For each app's schedule of a `warmstart bench
--fs xfs` run, on a fresh emulated hdd7200 of the same system image, from a cold cache: the
directories on the schedule's paths read whole and its files opened (inode order, or at their
addresses in the sweep), the data ranges handed to the kernel (fadvise WILLNEED) in LBA order,
then each range read to be sure it is in; ms (median of --reps) and the disk's block reads.

    python3 scripts/fsmeta-bench/merged.py --apps vim,python [--layout random] [--reps 3]

Root; the bench must have recorded the apps on XFS with that layout."""

import argparse
import os
import sqlite3
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from order import dirs_on, on_mount, xfs_inode_sector    # noqa: E402
from warmstart.emudisk import EmuDisk                      # noqa: E402
from warmstart.recorder.coldcache import drop_caches      # noqa: E402


def schedule(db, name: str, mnt: str):
    """The data ranges [(sector, path, offset, length)] of the app's active schedule, in LBA
    order, its paths moved onto mnt."""
    sid = db.execute("SELECT s.id FROM schedules s JOIN apps a ON a.id = s.app_id WHERE a.name = ? "
                     "AND s.active = 1", (name,)).fetchone()
    if not sid:
        sys.exit(f"no active schedule of {name}: run `warmstart bench --fs xfs` with that app first")
    paths = {}
    for no, p in db.execute("SELECT file_no, path FROM schedule_files WHERE schedule_id = ?", sid):
        p = os.fsdecode(p)
        if "/mnt/" in p:
            paths[no] = on_mount(p, mnt)
    ranges = [(sector, paths[no], off, n) for sector, no, off, n in db.execute(
        "SELECT sector, file_no, file_offset, length FROM schedule_ranges WHERE schedule_id = ? "
        "AND file_no IS NOT NULL ORDER BY sector", sid) if no in paths and os.path.isfile(paths[no])]
    return ranges


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--apps", default="vim,python")
    ap.add_argument("--db", default="/var/lib/warmstart/bench.db")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--layout", default="packaged", choices=("packaged", "random"))
    a = ap.parse_args()
    disk = EmuDisk.up("fsmeta-merged", profile="hdd7200", image="system" if a.layout == "packaged"
                      else "system-random", fs="xfs")
    bench_disk = "hdd7200" if a.layout == "packaged" else "hdd7200.random"
    mnt = str(disk.mountpoint)
    db = sqlite3.connect(a.db)
    try:
        for app in a.apps.split(","):
            ranges = schedule(db, f"{app}-{bench_disk}.xfs", mnt)
            files = sorted({p for _, p, _, _ in ranges})
            dirs = dirs_on(files, mnt)
            ino = {x: os.lstat(x).st_ino for x in dirs + files}      # warm: before the drops
            is_dir = set(dirs)
            by_ino = sorted(dirs + files, key=ino.get)
            sector_of = xfs_inode_sector(mnt)
            place = {x: sector_of(i) for x, i in ino.items()}   # where each lookup reads first

            def sweep(fds):
                for _, p, off, n in ranges:
                    os.posix_fadvise(fds[p], off, n, os.POSIX_FADV_WILLNEED)

            def settle(fds):
                for _, p, off, n in ranges:
                    os.pread(fds[p], n, off)

            def step_then_sweep():
                fds = {}
                for x in by_ino:
                    if x in is_dir:
                        os.listdir(x)
                    else:
                        fds[x] = os.open(x, os.O_RDONLY)
                sweep(fds)
                return fds

            def one_sweep():
                fds = {}
                items = [(place[x], 0, x) for x in dirs + files] + \
                        [(sector, 1, (p, off, n)) for sector, p, off, n in ranges]
                for _, kind, x in sorted(items, key=lambda t: (t[0], t[1])):
                    if kind == 0:
                        if x in is_dir:
                            os.listdir(x)
                        elif x not in fds:
                            fds[x] = os.open(x, os.O_RDONLY)
                    else:
                        p, off, n = x
                        if p not in fds:                 # its data lies before its inode
                            fds[p] = os.open(p, os.O_RDONLY)
                        os.posix_fadvise(fds[p], off, n, os.POSIX_FADV_WILLNEED)
                return fds

            variants = {"step, then the sweep (as the replayer)": step_then_sweep,
                        "one sweep, each lookup at its address": one_sweep}
            times, reads = {k: [] for k in variants}, {}
            for _ in range(a.reps):
                for name, run in variants.items():
                    drop_caches()
                    disk.reset_stats()
                    t0 = time.monotonic()
                    fds = run()
                    t_submit = time.monotonic() - t0
                    settle(fds)
                    times[name].append(((time.monotonic() - t0) * 1000, t_submit * 1000))
                    reads[name] = disk.stats()["reads"]
                    for fd in fds.values():
                        os.close(fd)
            mib = sum(n for *_, n in ranges) / 2 ** 20
            print(f"xfs {a.layout} {app}: {len(files)} files, {len(dirs)} directories, {len(ranges)} ranges, "
                  f"{mib:.1f} MiB")
            for name in variants:
                t = times[name]
                print(f"  {name}: {statistics.median(x for x, _ in t):.0f} ms "
                      f"(submitted after {statistics.median(s for _, s in t):.0f}), {reads[name]} reads "
                      f"{[round(x) for x, _ in t]}")
    finally:
        disk.down()


if __name__ == "__main__":
    main()
