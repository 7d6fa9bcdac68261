#!/usr/bin/env python3
"""What one part of the metadata step's input gives (docs/replayer.md, "The metadata step"): the
directories a launch looked names up in (`lookup_dirs`, the default), or the places of the
inodes that order the step (`metadata_positions`). Records the bench's git and python on a fresh
emulated hdd7200 with the random-layout system image in FS, analyzes them, then alternates
`warmstart run --mode reorder` launches (caches dropped before each) of the schedule as analyzed
and of a copy of it without that part; prints each and the medians (launch, metadata step,
pre-buffer, the app after its release).

    python3 scripts/fsmeta-bench/lookdirs.py --fs xfs --reps 3
    python3 scripts/fsmeta-bench/lookdirs.py --fs btrfs --without metadata_positions --apps python

Root; minutes the first time (the image is built)."""

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from warmstart.bench.apps import FILES_DIR, catalogue, install_files   # noqa: E402
from warmstart.db import open_db                 # noqa: E402
from warmstart.db.schedules import load_active_schedule, save_schedule   # noqa: E402
from warmstart.emudisk.disk import EmuDisk      # noqa: E402
from runs import cold_run, print_medians        # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--fs", default="xfs")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--apps", default="git,python")
    ap.add_argument("--without", default="lookup_dirs", choices=("lookup_dirs", "metadata_positions"))
    a = ap.parse_args()
    apps = [catalogue()[n] for n in a.apps.split(",")]
    tmp = Path(tempfile.mkdtemp())
    with_dirs, without = tmp / "with.db", tmp / "without.db"
    emu = EmuDisk.up(f"lookdirs-{a.fs}", profile="hdd7200", image="system-random", fs=a.fs, fresh=True,
                     progress=lambda m: print(m, file=sys.stderr))
    res = {}
    try:
        install_files(apps, Path(os.fsdecode(emu.mountpoint)) / FILES_DIR.lstrip("/"))
        ws = [sys.executable, "-m", "warmstart"]
        for app in apps:
            argv = emu.chroot_argv(app.argv)
            subprocess.run(ws + ["--db", str(with_dirs), "record", "--name", app.name, "--", *argv], check=True,
                           capture_output=True)
            p = subprocess.run(ws + ["--db", str(with_dirs), "analyze", "--json", app.name], check=True,
                               capture_output=True, text=True)
            rep = json.loads(p.stdout)
            print(f"{app.name}: {rep['name_lookups']}; {rep['metadata_positions']} inodes placed")
        shutil.copy(with_dirs, without)
        conn = open_db(without)
        for app in apps:      # the same schedule, stored again without that part, made active
            sched = load_active_schedule(conn, app.name)
            sched.params = {**sched.params, a.without: [] if a.without == "lookup_dirs" else {}}
            save_schedule(conn, sched)
        conn.close()
        for _ in range(a.reps):
            for app in apps:
                for label, db in (("with", with_dirs), ("without", without)):
                    d = cold_run(emu, ws + ["--db", str(db)], emu.chroot_argv(app.argv), "--mode", "reorder",
                                 "--name", app.name)
                    row = (d["launch_time_s"], d["replay_stats"]["t_meta_ns"] / 1e9, d["prebuffer_s"],
                           d["app_time_s"])
                    res.setdefault(f"{app.name} {label} {a.without}", []).append(row)
                    print(f"{app.name} {label} {a.without}: launch {row[0]:.3f} s, step {row[1]:.3f}, "
                          f"pre-buffer {row[2]:.3f}, app {row[3]:.3f}", flush=True)
    finally:
        emu.down()
    print_medians(f"of {a.reps} ({a.fs}, hdd7200, random layout, reorder): launch / metadata step / pre-buffer / "
                  f"app after release", res)


if __name__ == "__main__":
    main()
