#!/usr/bin/env python3
"""`record`'s time beyond the launch (wall minus the recording's launch_time_s), median of N.

Issue 24's target is <= 1 s on this machine's root file system and on the emulated HDD; this is
the command docs/recording.md ("Time beyond the launch") quotes. Needs root, tracefs and, for
--where emulated, FUSE and loop devices.

  python3 scripts/record-overhead.py --where root                # /bin/sleep 0.1 on the root fs
  python3 scripts/record-overhead.py --where emulated            # ... in the emulated HDD's system image
  python3 scripts/record-overhead.py --where emulated --busy     # ... while another emulated disk
                                                                 #     gets 256 MiB files written over and over
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
MiB = 1 << 20


def overheads(argv, n: int):
    out = []
    env = dict(os.environ, PYTHONPATH=str(REPO))
    with tempfile.TemporaryDirectory(prefix="record-overhead-") as tmp:
        for i in range(n):
            t = time.monotonic()
            r = subprocess.run([sys.executable, "-m", "warmstart", "--db", f"{tmp}/o{i}.db", "record", "--json",
                                "--name", "s", "--", *argv], env=env, capture_output=True, timeout=300)
            wall = time.monotonic() - t
            if r.returncode != 0:
                sys.exit(f"record failed: {r.stderr.decode(errors='replace')}")
            out.append(wall - json.loads(r.stdout)["recordings"][0]["launch_time_s"])
    return out


def writer(path: Path, stop: threading.Event, written: list) -> None:
    """256 MiB files truncated and rewritten, as `dd of=` does, until stop."""
    while not stop.is_set():
        with open(path, "wb") as f:
            for _ in range(256):
                f.write(bytes(MiB))
        written.append(time.monotonic())
        stop.wait(0.1)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--where", choices=("root", "emulated"), default="root")
    ap.add_argument("--busy", action="store_true", help="write another emulated disk meanwhile")
    ap.add_argument("-n", type=int, default=5)
    args = ap.parse_args()
    from warmstart.emudisk import EmuDisk
    disks = []
    try:
        argv = ["/bin/sleep", "0.1"]
        if args.where == "emulated":
            disks.append(EmuDisk.up(name="overhead-sys", profile="hdd7200", image="system", fresh=True))
            argv = disks[-1].chroot_argv(argv)
        stop, written, thread = threading.Event(), [], None
        if args.busy:
            disks.append(EmuDisk.up(name="overhead-busy", profile="hdd7200", image="empty", size_mb=512, fresh=True))
            big = disks[-1].mountpoint / "busy.bin"
            thread = threading.Thread(target=writer, args=(big, stop, written), daemon=True)
            thread.start()
            time.sleep(1.0)
        try:
            runs = overheads(argv, args.n)
        finally:
            stop.set()
            if thread:
                thread.join()
        print(f"record overhead (wall - launch), {args.where}{', another disk written' if args.busy else ''}: "
              f"median {statistics.median(runs):.3f} s, runs {' '.join(f'{x:.3f}' for x in runs)}"
              + (f" ({len(written)} files of 256 MiB written meanwhile)" if args.busy else ""))
    finally:
        for d in disks:
            d.down()


if __name__ == "__main__":
    main()
