#!/usr/bin/env python3
"""The metadata step split by segment against all of it before segment 1 (docs/replayer.md, "The
metadata step"): records the bench's apps (--apps) on a fresh emulated disk (--disk hdd7200 or
ssd, --fs xfs or btrfs, --layout packaged or random), analyzes each recording twice, as `analyze`
does by default (the step split, the reads of metadata kept in the launch sequence) and with
`--step-first` (as before 2026-11-29), then alternates segmented launches of the two schedules,
made cold as the bench makes them (runs.cold_run); prints each launch and the medians (launch,
the whole step, its part before the release, the release, the app after it).

    python3 scripts/fsmeta-bench/split.py --disk ssd --fs btrfs --apps git,perl,python,vim --reps 5
    python3 scripts/fsmeta-bench/split.py --disk hdd7200 --fs xfs --layout packaged --reps 3

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
from warmstart.emudisk.disk import EmuDisk      # noqa: E402
from runs import cold_run, print_medians        # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--disk", default="ssd", choices=("hdd7200", "ssd"))
    ap.add_argument("--fs", default="btrfs", choices=("xfs", "btrfs"))
    ap.add_argument("--layout", default="packaged", choices=("packaged", "random"))
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--apps", default="git,perl,python,vim")
    a = ap.parse_args()
    apps = [catalogue()[n] for n in a.apps.split(",")]
    tmp = Path(tempfile.mkdtemp())
    split, first = tmp / "split.db", tmp / "first.db"
    image = "system" if a.layout == "packaged" else "system-random"
    emu = EmuDisk.up(f"split-{a.fs}", profile=a.disk, image=image, fs=a.fs, fresh=True,
                     progress=lambda m: print(m, file=sys.stderr))
    res = {}
    ws = [sys.executable, "-m", "warmstart"]
    try:
        install_files(apps, Path(os.fsdecode(emu.mountpoint)) / FILES_DIR.lstrip("/"))
        for app in apps:
            subprocess.run(ws + ["--db", str(split), "record", "--name", app.name, "--", *emu.chroot_argv(app.argv)],
                           check=True, capture_output=True)
        shutil.copy(split, first)
        for db, extra in ((split, []), (first, ["--step-first"])):
            for app in apps:
                p = subprocess.run(ws + ["--db", str(db), "analyze", "--json", app.name, *extra], check=True,
                                   capture_output=True, text=True)
                rep = json.loads(p.stdout)
                step = rep.get("metadata_step") or {}
                print(f"{app.name} {'first' if extra else 'split'}: {len(rep['segments'])} segments, "
                      f"{rep['requests']} requests, t_exp {rep['t_exp_s']:.3f} s, step {step.get('t_s', 0):.3f} s "
                      f"modelled, {(step.get('segments_s') or [step.get('t_s', 0)])[0]:.3f} s before segment 1")
        for _ in range(a.reps):
            for app in apps:
                for label, db in (("split", split), ("first", first)):
                    d = cold_run(emu, db, emu.chroot_argv(app.argv), "segmented", app.name)
                    st = d["replay_stats"]
                    row = (d["launch_time_s"], st["t_meta_ns"] / 1e9, st["t_meta_prebuffer_ns"] / 1e9,
                           d["prebuffer_s"], d["app_time_s"])
                    res.setdefault(f"{app.name} {label}", []).append(row)
                    print(f"{app.name} {label}: launch {row[0]:.3f} s, step {row[1]:.3f} ({row[2]:.3f} before the "
                          f"release), release {row[3]:.3f}, app {row[4]:.3f}", flush=True)
    finally:
        emu.down()
        shutil.rmtree(tmp, ignore_errors=True)
    print_medians(f"of {a.reps} ({a.fs}, {a.disk}, {a.layout} layout, segmented): launch / step / step before the "
                  f"release / release / app after it", res)


if __name__ == "__main__":
    main()
