#!/usr/bin/env python3
"""The metadata step's orders compared (docs/replayer.md, "The metadata step"): for each app's
schedule of a `warmstart bench --fs FS` run, the directories on its paths and its files, warmed
from a cold cache in several orders on a fresh emulated hdd7200 of the same system image; ms
(median of --reps) and the disk's block reads.

    python3 scripts/fsmeta-bench/order.py --fs xfs --apps vim,python [--db /var/lib/warmstart/bench.db]
    python3 scripts/fsmeta-bench/order.py --disk ssd --fs xfs --apps vim,python --threads 4,16

--layout random: the random-layout image and the bench's schedules on it (`bench --layout random`).
--threads adds the one-pass orders run by that many threads taking the pass's steps in order
(an emulated SSD serves requests in flight together; the emulated hdd7200 in arrival order).

Root; the bench must have recorded the apps on that file system (their schedules name the bench
disk's mount point, mapped here onto this script's own)."""

import argparse
import os
import re
import sqlite3
import statistics
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from warmstart.emudisk import EmuDisk                      # noqa: E402
from warmstart.recorder.coldcache import drop_caches      # noqa: E402


def on_mount(path: str, mnt: str) -> str:
    """A path of the bench disk's mount (…/mnt/…) moved onto this script's mount point mnt."""
    return mnt + path[path.index("/mnt/") + 4:]


def dirs_on(files, mnt: str):
    """The directories on the files' paths at or below mnt, sorted."""
    dirs = sorted({os.path.dirname(p[:i]) for p in files for i in range(len(mnt) + 1, len(p) + 1)
                   if p[i - 1:i] == "/"} | {os.path.dirname(p) for p in files})
    return [d for d in dirs if len(d) >= len(mnt)]


def schedule_paths(db, app: str, disk: str, fs: str, mnt: str):
    rows = db.execute("SELECT sf.path FROM schedule_files sf JOIN schedules s ON s.id = sf.schedule_id "
                      "JOIN apps a ON a.id = s.app_id WHERE a.name = ? AND s.active = 1",
                      (f"{app}-{disk}.{fs}",)).fetchall()
    if not rows:
        sys.exit(f"no active schedule of {app}-{disk}.{fs}: run `warmstart bench --disk {disk} --fs {fs} "
                 f"--apps {app}` first")
    paths = [on_mount(os.fsdecode(p), mnt) for (p,) in rows]
    return [p for p in paths if os.path.isfile(p)]      # the bench's own files are not in the image


def xfs_inode_sector(mnt: str):
    """A function: XFS inode number -> the sector of its cluster, from the file system's geometry."""
    info = subprocess.run(["xfs_info", mnt], capture_output=True, text=True, check=True).stdout
    agsize = int(re.search(r"agsize=(\d+)", info).group(1))
    bsize = int(re.search(r"bsize=(\d+)", info).group(1))
    isize = int(re.search(r"isize=(\d+)", info).group(1))
    inopblog, agblklog = (bsize // isize).bit_length() - 1, (agsize - 1).bit_length()

    def inode_sector(i):
        agno, agbno = i >> (inopblog + agblklog), (i >> inopblog) & ((1 << agblklog) - 1)
        return (agno * agsize + agbno) * (bsize // 512)
    return inode_sector


def xfs_physical_order(mnt: str, dirs, files, ino):
    """The one pass's steps (an lstat of each directory and file, a listing of each directory)
    sorted by the disk address each reads first: an inode's cluster from its number and the file
    system's geometry, a directory's first block from XFS_IOC_GETBMAPX (`xfs_io bmap`)."""
    inode_sector = xfs_inode_sector(mnt)
    steps = [(inode_sector(ino[x]), 0, "stat", x) for x in dirs + files]
    for d in dirs:
        out = subprocess.run(["xfs_io", "-r", "-c", "bmap", d], capture_output=True, text=True).stdout
        blocks = [int(m.group(1)) for m in re.finditer(r"\]: (\d+)\.\.", out)]
        steps.append((min(blocks) if blocks else inode_sector(ino[d]), 1, "list", d))
    return [(kind, x) for _, _, kind, x in sorted(steps)]


def btrfs_leaf_order(dirs, files):
    """The one pass's lookups sorted by where each inode's leaf is (Btrfs.metadata_positions, what
    the analysis stores for the step)."""
    from warmstart.fs import FileSystems
    entries = [(os.fsencode(x), os.lstat(x)) for x in dirs + files]
    pos = FileSystems().of_path(entries[0][0]).metadata_positions(entries)
    key = {x: (st.st_dev, st.st_ino) for x, (_, st) in zip(dirs + files, entries)}
    return sorted(dirs + files, key=lambda x: (pos.get(key[x], 0), key[x][1]))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--fs", required=True, choices=("xfs", "btrfs", "ext4"))
    ap.add_argument("--apps", default="vim,python")
    ap.add_argument("--db", default="/var/lib/warmstart/bench.db")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--disk", default="hdd7200", choices=("hdd7200", "ssd"))
    ap.add_argument("--layout", default="packaged", choices=("packaged", "random"))
    ap.add_argument("--threads", default="", help="comma-separated thread counts for the one-pass orders")
    a = ap.parse_args()
    image = "system" if a.layout == "packaged" else "system-random"
    disk = EmuDisk.up("fsmeta-order", profile=a.disk, image=image, fs=a.fs)
    bench_disk = a.disk if a.layout == "packaged" else f"{a.disk}.random"
    mnt = str(disk.mountpoint)
    db = sqlite3.connect(a.db)
    try:
        for app in a.apps.split(","):
            files = schedule_paths(db, app, bench_disk, a.fs, mnt)
            dirs = dirs_on(files, mnt)
            ino = {x: os.lstat(x).st_ino for x in dirs + files}      # warm: before the drops
            by_ino = sorted(dirs + files, key=ino.get)
            depth = {d: d.count("/") for d in dirs}

            def listed_levels():
                for lv in sorted(set(depth.values())):
                    for d in sorted((d for d in dirs if depth[d] == lv), key=ino.get):
                        os.listdir(d)

            def files_by_ino():
                for p in sorted(files, key=ino.get):
                    os.lstat(p)

            phys = xfs_physical_order(mnt, dirs, files, ino) if a.fs == "xfs" else None
            if a.fs == "btrfs":
                leaf_order = btrfs_leaf_order(dirs, files)

            orders = {
                "directories read whole level by level, then files": lambda: (listed_levels(), files_by_ino()),
                "directories read whole in inode order, then files":
                    lambda: ([os.listdir(d) for d in sorted(dirs, key=ino.get)], files_by_ino()),
                "one pass, directories read whole": lambda: [os.listdir(x) if x in depth else os.lstat(x) for x in by_ino],
                "one pass, lookups only": lambda: [os.lstat(x) for x in by_ino],
                "files looked up only": files_by_ino,
            }
            if phys:
                orders["one pass, each step at the disk address it reads first"] = \
                    lambda: [os.listdir(x) if kind == "list" else os.lstat(x) for kind, x in phys]
            if a.fs == "btrfs":
                orders["one pass, lookups only, in the disk order of each inode's leaf (as the step)"] = \
                    lambda: [os.lstat(x) for x in leaf_order]
            for n in [int(x) for x in a.threads.split(",") if x]:
                def threaded(step, n=n):
                    with ThreadPoolExecutor(n) as pool:
                        list(pool.map(step, by_ino))
                orders[f"one pass, directories read whole, {n} threads"] = \
                    lambda threaded=threaded: threaded(lambda x: os.listdir(x) if x in depth else os.lstat(x))
                orders[f"one pass, lookups only, {n} threads"] = lambda threaded=threaded: threaded(os.lstat)
            times, reads = {k: [] for k in orders}, {}
            for _ in range(a.reps):
                for name, run in orders.items():
                    drop_caches()
                    disk.reset_stats()
                    t0 = time.monotonic()
                    run()
                    times[name].append((time.monotonic() - t0) * 1000)
                    reads[name] = disk.stats()["reads"]
            print(f"{a.disk} {a.fs} {app}: {len(files)} files, {len(dirs)} directories")
            for name in orders:
                print(f"  {name}: {statistics.median(times[name]):.0f} ms, {reads[name]} reads")
    finally:
        disk.down()


if __name__ == "__main__":
    main()
