#!/usr/bin/env python3
"""Each segment's metadata before its data, or one LBA sweep of both (`analyze --no-metadata-first`):
the pre-buffer of the same recording under each (docs/algorithms.md, "Fetch order").

On a fresh emulated hdd7200 with the system image (ext4): the bench's python launch (15 standard-
library imports) recorded once, analyzed both ways; then `warmstart run --mode reorder` of each
schedule in turn (the pre-buffer is the whole schedule, fetched before the launch), the caches
dropped before each, the order alternated per repetition. Prints each launch and the medians of
the pre-buffer (replayer start to release) and of the launch. Root, tracefs, FUSE, loop devices.

    python3 scripts/metadata-first.py [--reps 3]
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

VARIANTS = {"metadata first": [], "one sweep": ["--no-metadata-first"]}


def ws(db: str, *args: str) -> dict:
    r = subprocess.run([sys.executable, "-m", "warmstart", "--db", db, *args],
                       capture_output=True, text=True, env=dict(os.environ, PYTHONPATH=str(REPO)), timeout=600)
    if r.returncode != 0:
        sys.exit(f"warmstart {args[0]} failed: {r.stderr.strip()[-2000:]}")
    return json.loads(r.stdout)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=3)
    args = ap.parse_args()
    from warmstart.bench.apps import catalogue
    from warmstart.db import open_db
    from warmstart.db.schedules import activate_schedule, list_schedules
    from warmstart.emudisk import EmuDisk
    disk = EmuDisk.up(name="metadata-first", profile="hdd7200", image="system", fresh=True)
    try:
        argv = disk.chroot_argv(catalogue()["python"].argv)
        with tempfile.TemporaryDirectory(prefix="metadata-first-") as tmp:
            db = f"{tmp}/w.db"
            disk.drop_caches()
            ws(db, "record", "--name", "py", "--json", "--", *argv)
            ids = {}
            for name, flags in VARIANTS.items():
                ws(db, "analyze", "py", "--json", *flags)
                ids[name] = max(s["id"] for s in list_schedules(open_db(db), "py"))
            got = {name: {"prebuffer_s": [], "launch_s": []} for name in VARIANTS}
            for rep in range(args.reps):
                for name in (list(VARIANTS) if rep % 2 == 0 else list(VARIANTS)[::-1]):
                    conn = open_db(db)
                    activate_schedule(conn, "py", ids[name])
                    conn.close()
                    disk.drop_caches()
                    r = ws(db, "run", "--name", "py", "--mode", "reorder", "--json", "--", *argv)
                    if not r.get("prefetched", True):
                        sys.exit(f"rep {rep + 1} {name}: not prefetched: {r}")
                    got[name]["prebuffer_s"].append(r["prebuffer_s"])
                    got[name]["launch_s"].append(r["launch_time_s"])
                    print(f"rep {rep + 1} {name:15s} pre-buffer {r['prebuffer_s']:.3f} s, launch {r['launch_time_s']:.3f} s",
                          flush=True)
            for name, v in got.items():
                print(f"{name:15s} (schedule {ids[name]}): pre-buffer median {statistics.median(v['prebuffer_s']):.3f} s, "
                      f"launch median {statistics.median(v['launch_s']):.3f} s")
    finally:
        disk.down()


if __name__ == "__main__":
    main()
