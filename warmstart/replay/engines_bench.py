"""Compare the replayer's fetch engines on an emulated disk (the numbers in docs/replayer.md).

    python3 -m warmstart.replay.engines_bench [--profile hdd7200] [--reps 3]

Builds a scattered set of files on a fresh emulated disk, makes a schedule of all of them in
three segments, and for each engine (and I/O priority) measures, from a cold cache of those
files: the time until the replayer releases (reorder mode: everything resident), the time its
submission returned (--no-wait: how asynchronous the engine is), its CPU and peak RSS.
"""

import argparse
import os
import random
import statistics
import subprocess
import tempfile
import time

from ..db import open_db
from ..db.recordings import upsert_app
from ..db.schedules import load_active_schedule, save_schedule
from ..model import Range, Schedule, ScheduledFile, Segment
from ..launching import resolve_command
from ..paths import helper_binary
from .export import write_export
from .process import ENGINES


def _physical(path: bytes) -> int:
    import fcntl
    import struct
    fd = os.open(path, os.O_RDONLY)
    try:
        buf = bytearray(struct.pack("=QQIIII", 0, 1, 1, 0, 1, 0) + bytes(56))
        fcntl.ioctl(fd, 0xC020660B, buf)
        return struct.unpack_from("=Q", buf, 40)[0] // 512
    finally:
        os.close(fd)


def build_files(root, n=300, seed=7):
    """n files of 8..192 KiB written in a shuffled order among fillers, so they are scattered."""
    rng = random.Random(seed)
    paths = []
    for i in range(n):
        p = os.path.join(root, f"f{i:04d}")
        with open(p, "wb") as f:
            f.write(os.urandom(rng.choice([8, 16, 32, 64, 128, 192]) * 1024))
        with open(os.path.join(root, f"filler{i:04d}"), "wb") as f:
            f.write(bytes(rng.randrange(64, 640) * 1024))
        paths.append(os.fsencode(p))
    os.sync()
    rng.shuffle(paths)   # the "launch order" is not the disk order
    return paths


def make_schedule(conn, paths):
    upsert_app(conn, "bench-engines", resolve_command(["true"]), ["true"])
    files = []
    for p in paths:
        st = os.stat(p)
        files.append(ScheduledFile(p, st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns))
    third = len(files) // 3
    segs = []
    for k, chunk in enumerate((files[:third], files[third:2 * third], files[2 * third:]), start=1):
        rs = sorted((Range(f.dev, _physical(f.path), f.size // 512, f.size, f, 0) for f in chunk),
                    key=lambda r: r.sector)
        segs.append(Segment(k, 1, 1, 0.0, 0.05, sum(r.length for r in rs), rs))
    save_schedule(conn, Schedule(None, "bench-engines", "test", "model", 0, sum(s.bytes for s in segs),
                                 0, [], segs, files, {}))
    return load_active_schedule(conn, "bench-engines")


def evict(paths):
    for p in paths:
        fd = os.open(p, os.O_RDONLY)
        # Read first: waits for reads still in flight from a --no-wait run, which DONTNEED
        # could not drop (locked pages) and which would land in the cache afterwards.
        while os.read(fd, 1 << 20):
            pass
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        os.close(fd)


def run_once(export, paths, args):
    import json
    evict(paths)
    r, w = os.pipe()
    t0 = time.monotonic()
    proc = subprocess.run([str(helper_binary("warmstart-replay")), "--stats-fd", str(w), *args, export],
                          pass_fds=(w,), capture_output=True)
    wall = time.monotonic() - t0
    os.close(w)
    with os.fdopen(r) as f:
        st = json.load(f)
    assert proc.returncode == 0, proc.stderr
    return wall, st


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--profile", default="hdd7200")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--files", type=int, default=300)
    a = ap.parse_args()
    from ..emudisk import EmuDisk
    disk = EmuDisk.up(name="replay-engines", profile=a.profile, image="empty", size_mb=512, fresh=True)
    try:
        root = os.path.join(disk.mountpoint, "engines")
        os.makedirs(root, exist_ok=True)
        paths = build_files(root, a.files)
        with tempfile.TemporaryDirectory() as tmp:
            conn = open_db(os.path.join(tmp, "db"))
            sched = make_schedule(conn, paths)
            export = os.fsdecode(write_export(sched, os.path.join(tmp, "s.wsr")).path)
            total = sched.total_bytes
            print(f"profile {a.profile}: {len(paths)} files, {total / 2**20:.1f} MiB, reps {a.reps}")
            print("| engine | ioprio | release s (all resident) | submit-only s (--no-wait) | wait at release ms "
                  "| disk requests | CPU ms | peak RSS KiB | first I/O ms |")
            print("|---|---|---|---|---|---|---|---|---|")
            configs = [(e, "be") for e in ENGINES] + [("readahead", "idle"), ("pread", "idle")]
            for engine, prio in configs:
                rel, sub, late, reqs, cpu, rss, fio = [], [], [], [], [], [], []
                for _ in range(a.reps):
                    disk.reset_stats()
                    _, st = run_once(export, paths, ["--mode", "reorder", "--engine", engine, "--ioprio", prio])
                    reqs.append(disk.stats()["requests"])
                    assert st["bytes_fetched"] == total, st
                    rel.append(st["t_prebuffer_ns"] / 1e9)
                    cpu.append((st["cpu_user_ns"] + st["cpu_sys_ns"]) / 1e6)
                    rss.append(st["max_rss_kb"])
                    fio.append(st["t_first_io_ns"] / 1e6)
                    late.append(st["prebuffer_wait_ns"] / 1e6)
                    _, st2 = run_once(export, paths, ["--mode", "reorder", "--engine", engine,
                                                      "--ioprio", prio, "--no-wait"])
                    sub.append(st2["t_prebuffer_ns"] / 1e9)
                m = statistics.median
                print(f"| {engine} | {prio} | {m(rel):.3f} | {m(sub):.3f} | {m(late):.0f} | {m(reqs):.0f} "
                      f"| {m(cpu):.1f} | {max(rss)} | {m(fio):.2f} |", flush=True)
    finally:
        disk.down()


if __name__ == "__main__":
    main()
