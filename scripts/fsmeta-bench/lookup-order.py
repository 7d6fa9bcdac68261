#!/usr/bin/env python3
"""btrfs: the metadata step's lookups in three orders (docs/replayer.md, "The metadata step"),
and which the analysis chooses (Btrfs.step_order). For each app's schedule of a `warmstart bench --disk hdd7200 --fs btrfs`
run, on a fresh emulated hdd7200 of the same system image, from a cold cache: each directory on
the schedule's paths looked up and each file opened and its start sought (SEEK_DATA), as the
step does, in
  - every entry by the leaf holding its inode item (Btrfs.metadata_positions);
  - directories first, then files, each by that leaf (what step_order chooses where it predicts
    a quarter fewer seeks);
  - an elevator over the leaves each lookup reads: the leaf of its parent's name item (the key
    (parent, DIR_ITEM, crc32c name hash)) and the leaf of its inode item, both found from the
    tree's nodes (Btrfs.leaf_positions); each step the lookup whose unread leaves lie ahead of
    the last one read, nearest first, a new sweep when none does; a directory before what is
    in it.
ms (median of --reps), the disk's block reads and seeks. git's repository is built on the disk
and the bench's git command run once over it from a cold cache (as the bench's recording does:
relatime's atime updates move the leaves of what it reads, in the order it reads them).

    python3 scripts/fsmeta-bench/lookup-order.py --apps git,vim,python [--db /var/lib/warmstart/bench.db]
    python3 scripts/fsmeta-bench/lookup-order.py --apps '' --trees usr/share/doc,usr/include

Root (the leaves are found from the device)."""

import argparse
import os
import random
import sqlite3
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from order import dirs_on, schedule_paths                 # noqa: E402
from warmstart.bench.apps import FILES_DIR, catalogue, make_repo  # noqa: E402
from warmstart.emudisk import EmuDisk                      # noqa: E402
from warmstart.fs import FileSystems                      # noqa: E402
from warmstart.fs.btrfs import DIRS_FIRST                # noqa: E402
from warmstart.recorder.coldcache import drop_caches      # noqa: E402


def elevator(paths, leaves):
    todo, done, cached, head, out = set(paths), set(), set(), -1, []
    inside = set(paths)
    while todo:
        best = None
        for p in todo:
            if os.path.dirname(p) in inside and os.path.dirname(p) not in done:
                continue
            seq = list(dict.fromkeys(x for x in leaves[p] if x is not None and x not in cached))
            if not seq:
                k = (0, 0)
            elif seq == sorted(seq) and seq[0] > head:
                k = (1, seq[0])
            else:
                k = (2, seq[0])
            if best is None or k < best[0]:
                best = (k, p, seq)
        _, p, seq = best
        out.append(p)
        todo.discard(p)
        done.add(p)
        cached.update(seq)
        if seq:
            head = max(seq)
    return out


def tree_sample(mnt: str, tree: str, n: int = 600):
    """Up to n regular files of a tree of the system image (a fixed sample), each read once from
    a cold cache, as a launch would (the atime updates move their leaves)."""
    found = sorted(os.path.join(r, f) for r, _, names in os.walk(os.path.join(mnt, tree)) for f in names
                   if os.path.isfile(os.path.join(r, f)) and not os.path.islink(os.path.join(r, f)))
    random.Random(3).shuffle(found)
    files = sorted(found[:n])
    drop_caches()
    for f in files:
        with open(f, "rb") as h:
            h.read(1)
    os.sync()
    return files


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--apps", default="git,vim,python")
    ap.add_argument("--trees", default="", help="comma-separated trees of the image (usr/share/doc): "
                    "600 of their files each, read once, in place of an app's schedule")
    ap.add_argument("--db", default="/var/lib/warmstart/bench.db")
    ap.add_argument("--reps", type=int, default=3)
    a = ap.parse_args()
    disk = EmuDisk.up("fsmeta-lookup-order", profile="hdd7200", image="system", fs="btrfs")
    mnt = str(disk.mountpoint)
    db = sqlite3.connect(a.db)
    try:
        files_dir = Path(mnt + FILES_DIR)
        make_repo(files_dir)
        os.sync()
        drop_caches()
        subprocess.run(catalogue(str(files_dir))["git"].argv, stdout=subprocess.DEVNULL, check=True)
        os.sync()
        sets = [(app, schedule_paths(db, app, "hdd7200", "btrfs", mnt)) for app in a.apps.split(",") if app]
        sets += [(tree, tree_sample(mnt, tree)) for tree in a.trees.split(",") if tree]
        for app, files in sets:
            dirs = [d for d in dirs_on(files, mnt) if d != mnt]
            entries = [(os.fsencode(x), os.lstat(x)) for x in dirs + files]
            fsys = FileSystems().of_path(entries[0][0])
            key = {x: (st.st_dev, st.st_ino) for x, (_, st) in zip(dirs + files, entries)}
            # the leaves of its name item, its inode item (metadata_positions) and its first extent
            leaves = fsys.lookup_leaves(entries)
            pos = {e: r[1] for e, r in leaves.items() if r[1] is not None}

            def place(x):
                return pos.get(key[x], 0), key[x][1]

            name_and_inode = {x: leaves.get(key[x], (None, None))[:2] for x in dirs + files}
            chosen = fsys.step_order(entries)
            first = any(chosen.get(key[x], 0) >= DIRS_FIRST for x in files)
            orders = {"each inode's leaf": sorted(dirs + files, key=place),
                      "directories first, then files": sorted(dirs, key=place) + sorted(files, key=place),
                      "elevator over the name and inode leaves": elevator(dirs + files, name_and_inode)}
            is_dir = set(dirs)

            def step(x):
                if x in is_dir:
                    os.lstat(x)
                    return
                fd = os.open(x, os.O_RDONLY | os.O_NOATIME)
                try:
                    os.lseek(fd, 0, os.SEEK_DATA)
                except OSError:
                    pass
                os.close(fd)

            times, stats = {k: [] for k in orders}, {}
            for _ in range(a.reps):
                for name, order in orders.items():
                    drop_caches()
                    disk.reset_stats()
                    t0 = time.monotonic()
                    for x in order:
                        step(x)
                    times[name].append((time.monotonic() - t0) * 1000)
                    stats[name] = disk.stats()
            print(f"btrfs {app}: {len(files)} files, {len(dirs)} directories, {len(set(pos.values()))} inode leaves; "
                  f"the analysis chooses {'directories first' if first else 'each inode' + chr(39) + 's leaf'}")
            for name in orders:
                print(f"  {name}: {statistics.median(times[name]):.0f} ms "
                      f"({' '.join(f'{t:.0f}' for t in times[name])}), {stats[name]['reads']} reads, "
                      f"{stats[name]['seeks']} seeks")
    finally:
        disk.down()


if __name__ == "__main__":
    main()
