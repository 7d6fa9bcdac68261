#!/usr/bin/env python3
"""What one part of the metadata step's input gives (docs/replayer.md, "The metadata step"): the
directories a launch looked names up in (`lookup_dirs`, the default), the places of the
inodes that order the step (`metadata_positions`), or the files read whose data is inline in
the metadata (`inline_files`: btrfs, their ranges in the pre-buffer; without, the files left
out as before). Records the bench's git and python (--apps) on a fresh emulated hdd7200 with the
system image in FS (--layout random, the default, or packaged), analyzes them, then alternates
launches in mode reorder (--mode: or segmented, as hooked launches run; made cold as the bench
makes them: runs.cold_run) of the schedule as analyzed and of a copy of it without that part;
prints each and the medians (launch, metadata step, pre-buffer, the app after its release).

    python3 scripts/fsmeta-bench/lookdirs.py --fs xfs --reps 3
    python3 scripts/fsmeta-bench/lookdirs.py --fs btrfs --without metadata_positions --apps python
    python3 scripts/fsmeta-bench/lookdirs.py --fs xfs --without metadata_positions --mode segmented --layout packaged
    python3 scripts/fsmeta-bench/lookdirs.py --fs btrfs --without inline_files --apps git,vim,python

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


def without_inline(sched) -> None:
    """The schedule without the files it reads that have no extent (data inline in the
    metadata): their ranges and the files themselves (a file kept without ranges would be looked
    up by the step, which reads the same leaf)."""
    inline = {f for i, f in enumerate(sched.files)
              if not sched.extents.get(i) and any(r.file == f for s in sched.segments for r in s.ranges)}
    for seg in sched.segments:
        seg.bytes -= sum(r.length for r in seg.ranges if r.file in inline)
        seg.ranges = [r for r in seg.ranges if r.file not in inline]
    keep = [(i, f) for i, f in enumerate(sched.files) if f not in inline]
    sched.extents = {k: sched.extents.get(i, []) for k, (i, _) in enumerate(keep)}
    sched.files = [f for _, f in keep]
    sched.total_bytes = sum(s.bytes for s in sched.segments)
    print(f"{sched.app_name}: {len(inline)} inline files left out of the copy")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--fs", default="xfs")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--apps", default="git,python")
    ap.add_argument("--layout", default="random", choices=("packaged", "random"))
    ap.add_argument("--without", default="lookup_dirs", choices=("lookup_dirs", "metadata_positions", "inline_files"))
    ap.add_argument("--mode", default="reorder", choices=("reorder", "segmented"))
    a = ap.parse_args()
    apps = [catalogue()[n] for n in a.apps.split(",")]
    tmp = Path(tempfile.mkdtemp())
    with_dirs, without = tmp / "with.db", tmp / "without.db"
    image = "system" if a.layout == "packaged" else "system-random"
    emu = EmuDisk.up(f"lookdirs-{a.fs}", profile="hdd7200", image=image, fs=a.fs, fresh=True,
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
            print(f"{app.name}: {rep['name_lookups']}; {rep['metadata_positions']} inodes placed; "
                  f"{rep['filemap']['inline_placed']} of {rep['filemap']['inline_files']} inline files placed")
        shutil.copy(with_dirs, without)
        conn = open_db(without)
        for app in apps:      # the same schedule, stored again without that part, made active
            sched = load_active_schedule(conn, app.name)
            if a.without == "inline_files":
                without_inline(sched)
            else:
                sched.params = {**sched.params, a.without: [] if a.without == "lookup_dirs" else {}}
            save_schedule(conn, sched)
        conn.close()
        for _ in range(a.reps):
            for app in apps:
                for label, db in (("with", with_dirs), ("without", without)):
                    d = cold_run(emu, db, emu.chroot_argv(app.argv), a.mode, app.name)
                    row = (d["launch_time_s"], d["replay_stats"]["t_meta_ns"] / 1e9, d["prebuffer_s"],
                           d["app_time_s"])
                    res.setdefault(f"{app.name} {label} {a.without}", []).append(row)
                    print(f"{app.name} {label} {a.without}: launch {row[0]:.3f} s, step {row[1]:.3f}, "
                          f"pre-buffer {row[2]:.3f}, app {row[3]:.3f}", flush=True)
    finally:
        emu.down()
    print_medians(f"of {a.reps} ({a.fs}, hdd7200, {a.layout} layout, {a.mode}): launch / metadata step / pre-buffer / "
                  f"app after release", res)


if __name__ == "__main__":
    main()
