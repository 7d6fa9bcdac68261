#!/usr/bin/env python3
"""The metadata step in one pass in place order against sweeps (docs/replayer.md, "Sweeps"):
records and analyzes the bench's apps (--apps) on a fresh emulated hdd7200 with the system image
in FS (--layout packaged, the default, or random), then launches each alternately in mode
segmented with its schedule exported without and with WSR_FILE_AFTER_DIR (FileSystem.step_sweeps
off and on; --sweep-btrfs turns it on for btrfs too, whose module leaves it off), caches made
cold as the bench makes them (runs.cold_run); prints each launch and the medians (launch,
metadata step, pre-buffer, the app after its release).

    python3 scripts/fsmeta-bench/sweeps.py --fs xfs --reps 3
    python3 scripts/fsmeta-bench/sweeps.py --fs xfs --layout random --reps 3
    python3 scripts/fsmeta-bench/sweeps.py --fs btrfs --sweep-btrfs --apps python,vim,perl,git --reps 4

Root; minutes the first time (the image is built)."""

import argparse
import os
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from warmstart.bench.apps import FILES_DIR, catalogue, install_files   # noqa: E402
from warmstart.emudisk.disk import EmuDisk      # noqa: E402
from warmstart.fs import kind                   # noqa: E402
from runs import cold_run, print_medians        # noqa: E402

ALL = "python,gcc,node,synth,perl,git,vim,pycompile,perlpod"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--fs", default="xfs", choices=("xfs", "btrfs"))
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--apps", default=ALL)
    ap.add_argument("--layout", default="packaged", choices=("packaged", "random"))
    ap.add_argument("--sweep-btrfs", action="store_true", help="sweeps on btrfs too (its module says no)")
    a = ap.parse_args()
    cls = kind(a.fs)
    if a.fs == "btrfs" and not a.sweep_btrfs:
        ap.error("btrfs's module keeps the one pass: --sweep-btrfs to compare")
    apps = [catalogue()[n] for n in a.apps.split(",")]
    db = Path(tempfile.mkdtemp()) / "sweeps.db"
    image = "system" if a.layout == "packaged" else "system-random"
    emu = EmuDisk.up(f"sweeps-{a.fs}", profile="hdd7200", image=image, fs=a.fs, fresh=True,
                     progress=lambda m: print(m, file=sys.stderr))
    res = {}
    try:
        install_files(apps, Path(os.fsdecode(emu.mountpoint)) / FILES_DIR.lstrip("/"))
        ws = [sys.executable, "-m", "warmstart", "--db", str(db)]
        for app in apps:
            subprocess.run(ws + ["record", "--name", app.name, "--", *emu.chroot_argv(app.argv)], check=True,
                           capture_output=True)
            subprocess.run(ws + ["analyze", app.name], check=True, capture_output=True)
        for r in range(a.reps):
            for app in apps:
                for label in (("one pass", "sweeps") if r % 2 == 0 else ("sweeps", "one pass")):
                    cls.step_sweeps = label == "sweeps"      # read by the export of this launch
                    d = cold_run(emu, db, emu.chroot_argv(app.argv), "segmented", app.name)
                    row = (d["launch_time_s"], d["replay_stats"]["t_meta_ns"] / 1e9, d["prebuffer_s"],
                           d["app_time_s"])
                    res.setdefault(f"{app.name} {label}", []).append(row)
                    print(f"{app.name} {label}: launch {row[0]:.3f} s, step {row[1]:.3f}, "
                          f"pre-buffer {row[2]:.3f}, app {row[3]:.3f}", flush=True)
    finally:
        emu.down()
    print_medians(f"of {a.reps} ({a.fs}, hdd7200, {a.layout} layout, segmented): launch / metadata step / "
                  f"pre-buffer / app after release", res)


if __name__ == "__main__":
    main()
