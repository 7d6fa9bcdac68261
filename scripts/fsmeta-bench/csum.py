#!/usr/bin/env python3
"""btrfs: what warming the checksum tree before the data sweep would give (docs/replayer.md, "The
metadata step", tried and not kept). For each app's schedule of a `warmstart bench --disk hdd7200
--fs btrfs` run, from a cold cache: the metadata step's lookups (inode order), then the files'
data read in disk order (a WILLNEED for each, then read whole); and the same with the checksum
leaves read between the two by BTRFS_IOC_TREE_SEARCH_V2, either over the checksum items of the
files' extents in key order (logical addresses, runs within 1 MiB merged), or one search per leaf
holding them, in the leaves' disk order (found from the tree's nodes, Btrfs.leaf_positions). ms
of each part (median of --reps) and the disk's block reads.

    python3 scripts/fsmeta-bench/csum.py --apps vim,python [--db /var/lib/warmstart/bench.db]

Root (the tree search needs CAP_SYS_ADMIN)."""

import argparse
import collections
import fcntl
import os
import sqlite3
import statistics
import struct
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from order import schedule_paths                          # noqa: E402
from warmstart.emudisk import EmuDisk                      # noqa: E402
from warmstart.fiemap import mapped_extents               # noqa: E402
from warmstart.fs import FileSystems                      # noqa: E402
from warmstart.recorder.coldcache import drop_caches      # noqa: E402

SEARCH_V2 = 0xC0709411                   # _IOWR(0x94, 17, struct btrfs_ioctl_search_args_v2)
KEY = struct.Struct("=7Q4I4Q")           # btrfs_ioctl_search_key
CSUM_TREE, CSUM_OBJECTID, CSUM_KEY = 7, 2 ** 64 - 10, 128
SECTOR = 4096
BUF = 65536


def search_csums(fd: int, lo: int, hi: int) -> None:
    """Every checksum item of logical addresses [lo, hi]: the search reads their leaves."""
    buf = bytearray(KEY.size + 8 + BUF)
    while lo <= hi:
        KEY.pack_into(buf, 0, CSUM_TREE, CSUM_OBJECTID, CSUM_OBJECTID, lo, hi, 0, 2 ** 64 - 1,
                      CSUM_KEY, CSUM_KEY, 4096, 0, 0, 0, 0, 0)
        struct.pack_into("=Q", buf, KEY.size, BUF)
        fcntl.ioctl(fd, SEARCH_V2, buf, True)
        n = KEY.unpack_from(buf, 0)[9]
        if n == 0:
            return
        pos = KEY.size + 8
        for _ in range(n):
            _, _, offset, _, length = struct.unpack_from("=3Q2I", buf, pos)
            pos += 32 + length
        lo = offset + 1


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--apps", default="vim,python")
    ap.add_argument("--db", default="/var/lib/warmstart/bench.db")
    ap.add_argument("--reps", type=int, default=3)
    a = ap.parse_args()
    disk = EmuDisk.up("fsmeta-order", profile="hdd7200", image="system", fs="btrfs")
    mnt = str(disk.mountpoint)
    db = sqlite3.connect(a.db)
    fs = FileSystems().of_path(os.fsencode(mnt))
    try:
        for app in a.apps.split(","):
            files = schedule_paths(db, app, "hdd7200", "btrfs", mnt)
            dirs = sorted({os.path.dirname(p[:i]) for p in files for i in range(len(mnt) + 1, len(p) + 1)
                           if p[i - 1:i] == "/"} | {os.path.dirname(p) for p in files})
            dirs = [d for d in dirs if len(d) >= len(mnt)]
            ino = {x: os.lstat(x).st_ino for x in dirs + files}
            ext = {f: mapped_extents(os.fsencode(f)) for f in files}
            in_disk_order = sorted(files, key=lambda f: ext[f][0].physical if ext[f] else 0)
            runs = []
            for lo, hi in sorted((e.physical, e.physical + e.length) for f in files for e in ext[f]):
                if runs and lo <= runs[-1][1] + (1 << 20):
                    runs[-1][1] = max(runs[-1][1], hi)
                else:
                    runs.append([lo, hi])
            keys = [(CSUM_OBJECTID, CSUM_KEY, x) for lo, hi in runs for x in range(lo, hi, SECTOR)]
            first = {}      # leaf's disk offset -> the first address sought in it
            for (_, (_, _, x)), at in fs.leaf_positions({CSUM_TREE: keys}).items():
                first[at] = min(first.get(at, x), x)
            top = os.open(mnt, os.O_RDONLY)

            def lookups():
                for x in sorted(dirs + files, key=ino.get):
                    os.lstat(x)

            def csums():
                for lo, hi in runs:
                    search_csums(top, lo, hi - 1)

            def csum_leaves():
                for at in sorted(first):
                    search_csums(top, first[at], first[at])

            def data():
                fds = [os.open(f, os.O_RDONLY) for f in in_disk_order]
                for fd in fds:
                    os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_WILLNEED)
                for fd in fds:
                    while os.read(fd, 1 << 20):
                        pass
                    os.close(fd)

            res = collections.defaultdict(list)
            for _ in range(a.reps):
                for variant, steps in (("lookups, data", (lookups, data)),
                                       ("lookups, checksums, data", (lookups, csums, data)),
                                       ("lookups, checksum leaves in disk order, data", (lookups, csum_leaves, data))):
                    drop_caches()
                    for step in steps:
                        disk.reset_stats()
                        t0 = time.monotonic()
                        step()
                        res[(variant, step.__name__)].append(((time.monotonic() - t0) * 1000, disk.stats()["reads"]))
            os.close(top)
            print(f"btrfs {app}: {len(files)} files, {len(runs)} checksum runs, {len(first)} checksum leaves")
            for (variant, step), v in res.items():
                print(f"  {variant}: {step} {statistics.median(t for t, _ in v):.0f} ms, "
                      f"{statistics.median(n for _, n in v):.0f} reads")
    finally:
        disk.down()


if __name__ == "__main__":
    main()
