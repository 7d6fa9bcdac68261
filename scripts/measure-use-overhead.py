#!/usr/bin/env python3
"""What `warmstart run --measure-use` (page-use tracing) costs (docs/replayer.md, "Overhead").

A synthetic launch (build/synthlaunch: 2 reads of 8 KiB from each of 24 files of 64 KiB in a
temporary directory on the root file system, 2 ms of CPU every 8 files) is recorded once; then
`warmstart run --mode segmented` of it, warm (nothing is dropped), N times with --measure-use and
N times without, alternated. Prints the median launch time of each and the median wall time of
the command beyond its launch (the tracing instance's set-up and removal, the accuracy's
computation). Root and tracefs.

    python3 scripts/measure-use-overhead.py [-n 20]
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
SYNTH = REPO / "build" / "synthlaunch"
FILES, SIZE = 24, 64 * 1024


def ws(db: str, *args: str):
    t = time.monotonic()
    r = subprocess.run([sys.executable, "-m", "warmstart", "--db", db, *args], capture_output=True, text=True,
                       env=dict(os.environ, PYTHONPATH=str(REPO)), timeout=300)
    wall = time.monotonic() - t
    if r.returncode != 0:
        sys.exit(f"warmstart {args[0]} failed: {r.stderr.strip()[-2000:]}")
    return json.loads(r.stdout), wall


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("-n", type=int, default=20)
    args = ap.parse_args()
    if not SYNTH.exists():
        sys.exit("build/synthlaunch is missing: run `make build` first")
    with tempfile.TemporaryDirectory(prefix="measure-use-", dir="/var/tmp") as tmp:
        plan = []
        for i in range(FILES):
            p = Path(tmp) / f"f{i:02d}.bin"
            p.write_bytes(os.urandom(SIZE))
            plan += [f"read:{p}:0:8192", f"read:{p}:{SIZE // 2}:8192"]
            if i % 8 == 7:
                plan.append("cpu:2")
        argv = [str(SYNTH), *plan]
        db = f"{tmp}/w.db"
        ws(db, "record", "--name", "synth", "--json", "--", *argv)
        ws(db, "analyze", "synth", "--json")
        got = {"without": ([], []), "with --measure-use": ([], [])}
        for i in range(2 * args.n):
            name = list(got)[i % 2]
            flags = ["--measure-use"] if name != "without" else []
            r, wall = ws(db, "run", "--name", "synth", "--mode", "segmented", *flags, "--json", "--", *argv)
            if flags and not r.get("page_use"):
                sys.exit(f"--measure-use gave no accuracy: {r}")
            got[name][0].append(r["launch_time_s"])
            got[name][1].append(wall - r["launch_time_s"])
        for name, (launch, beyond) in got.items():
            print(f"{name:20s} launch median {statistics.median(launch) * 1e3:.2f} ms, "
                  f"the command beyond its launch {statistics.median(beyond):.3f} s (median of {args.n})")


if __name__ == "__main__":
    main()
