#!/usr/bin/env python3
"""The kernel's share of `record`'s steps (docs/recording.md, "Time beyond the launch"), each
timed around the same call the recorder makes, --reps times; ms, median and range:
  - drop_caches written (coldcache._drop), and a second time right after;
  - the ext4 journal checkpoint (EXT4_IOC_CHECKPOINT, fs/ext4.py) of each ext4 mount, after a
    sync; and of an emulated hdd7200's ext4 after 100 files were written to it and synced;
  - a tracefs instance set up as the recorder's: mkdir, `trace_clock` mono, `buffer_size_kb`;
  - its removal (rmdir), without and with a pid filter (`set_event_pid` and event-fork, as the
    task instance has: the filter is freed with it).

    python3 scripts/record-steps.py [--reps 5]

Root (drop_caches, the ioctl and tracefs need it)."""

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from warmstart.emudisk import EmuDisk                         # noqa: E402
from warmstart.fs import FileSystems                         # noqa: E402
from warmstart.recorder.coldcache import _drop              # noqa: E402
from warmstart.recorder.tracefs import tracefs_root         # noqa: E402


def timed(fn) -> float:
    t0 = time.monotonic()
    fn()
    return (time.monotonic() - t0) * 1000


def write(path: Path, value: str) -> None:
    with open(path, "w") as f:
        f.write(value)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=5)
    a = ap.parse_args()
    root = tracefs_root()
    disk = EmuDisk.up(f"record-steps-{os.getpid()}", profile="hdd7200", image="empty", size_mb=512, fresh=True)
    try:
        fss = FileSystems()
        ext4 = [fs for _, fs in fss.items() if fs.mount.fstype == "ext4" and fs.mount.target != bytes(disk.mountpoint)]
        emulated = fss.of_path(bytes(disk.mountpoint))
        run(a, root, ext4, emulated, Path(str(disk.mountpoint)))
    finally:
        disk.down()


def run(a, root, ext4, emulated, mnt):
    times = {}

    def note(name, ms):
        times.setdefault(name, []).append(ms)

    for rep in range(a.reps):
        os.sync()
        note("drop_caches", timed(_drop))
        note("drop_caches again at once", timed(_drop))
        os.sync()
        for fs in ext4:
            note("ext4 checkpoint after a sync (each ext4 mount)", timed(fs.release_pinned_metadata))
        for i in range(100):
            (mnt / f"f{rep}-{i}").write_bytes(b"x" * 8192)
        os.sync()
        note("ext4 checkpoint of the emulated disk after 100 files written and a sync",
             timed(emulated.release_pinned_metadata))
        for filtered in (False, True):
            inst = root / "instances" / f"warmstart-steps-{os.getpid()}-{int(filtered)}"
            note("instance mkdir", timed(lambda: os.mkdir(inst)))
            try:
                write(inst / "tracing_on", "0")
                note("trace_clock mono", timed(lambda: write(inst / "trace_clock", "mono")))
                note("buffer_size_kb 8192", timed(lambda: write(inst / "buffer_size_kb", "8192")))
                if filtered:
                    write(inst / "options" / "event-fork", "1")
                    write(inst / "set_event_pid", str(os.getpid()))
                write(inst / "events" / "sched" / "sched_process_exec" / "enable", "1")
            finally:
                note("rmdir, with a pid filter" if filtered else "rmdir", timed(lambda: os.rmdir(inst)))
    print(f"{a.reps} repetitions, {len(ext4)} ext4 mounts besides the emulated disk; ms, median (range)")
    for name, v in times.items():
        print(f"  {name}: {statistics.median(v):.1f} ({min(v):.1f}-{max(v):.1f})")


if __name__ == "__main__":
    main()
