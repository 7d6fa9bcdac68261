#!/usr/bin/env python3
"""What looking up every name the launch looked up would give (docs/replayer.md, "The metadata
step", tried and not kept). The names: each absolute path of a file syscall of the app, from a
warm run under `strace -f -e trace=%file` in its chroot (most of them do not exist: the paths an
app searches). For each app's schedule of a `warmstart bench --fs FS` run, from a cold cache:
`warmstart run --mode segmented` as it is, and the same after an lstat of every name (timed,
before the launch). Launch time and the app's own block reads, median of --reps.

    python3 scripts/fsmeta-bench/names.py --fs btrfs --apps vim,python [--db /var/lib/warmstart/bench.db]

Root (drop_caches, the emulated disk)."""

import argparse
import collections
import json
import os
import re
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from warmstart.bench import apps as appcat                       # noqa: E402
from warmstart.emudisk import EmuDisk                             # noqa: E402
from warmstart.recorder.coldcache import drop_caches             # noqa: E402
from warmstart.recorder.tracefs import Instance, tracefs_root    # noqa: E402

ISSUE = re.compile(rb"(\d+),(\d+) (\S+) .*? (\d+) \+ (\d+)")


def names_looked_up(argv) -> list:
    with tempfile.NamedTemporaryFile("r", errors="replace") as out:
        subprocess.run(["strace", "-f", "-qq", "-e", "trace=%file", "-o", out.name, *argv],
                       capture_output=True, check=True)
        return list(dict.fromkeys(m.group(1) for line in out for m in re.finditer(r'"(/[^"]*)"', line)))


def launch(db: str, app: str, argv, dev: int):
    with Instance(tracefs_root(), "ws-names", ["block/block_rq_issue"]) as inst:
        inst.start()
        r = subprocess.run([sys.executable, "-m", "warmstart", "--db", db, "run", "--mode", "segmented",
                            "--name", app, "--json", "--", *argv], capture_output=True, text=True, cwd=ROOT)
        inst.stop()
        evs = inst.take()
    if r.returncode:
        sys.exit(r.stderr)
    reads = collections.Counter()
    for ev in evs:
        m = ISSUE.search(ev.body)
        if m and b"R" in m.group(3) and os.makedev(int(m.group(1)), int(m.group(2))) == dev:
            reads["replayer" if ev.comm.startswith("warmstart") else "other"] += 1
    return json.loads(r.stdout)["launch_time_s"], reads


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--fs", default="btrfs")
    ap.add_argument("--apps", default="vim,python")
    ap.add_argument("--db", default="/var/lib/warmstart/bench.db")
    ap.add_argument("--reps", type=int, default=3)
    a = ap.parse_args()
    db = sqlite3.connect(a.db)
    cat = appcat.catalogue()
    for app in a.apps.split(","):
        name = f"{app}-hdd7200.{a.fs}"
        row = db.execute("SELECT sf.path FROM schedule_files sf JOIN schedules s ON s.id = sf.schedule_id "
                         "JOIN apps a ON a.id = s.app_id WHERE a.name = ? AND s.active = 1", (name,)).fetchone()
        if row is None:
            sys.exit(f"no active schedule of {name}: run `warmstart bench --fs {a.fs} --apps {app}` first")
        disk_name = os.fsdecode(row[0]).split("/run/warmstart-emu/")[1].split("/")[0]
        disk = EmuDisk.up(disk_name, profile="hdd7200", image="system", fs=a.fs)
        try:
            appcat.install_files([cat[app]], disk.mountpoint / appcat.FILES_DIR.lstrip("/"))
            subprocess.run(["sync"], check=True)
            argv = disk.chroot_argv(cat[app].argv)
            names = names_looked_up(argv)
            mnt = str(disk.mountpoint)
            found = sum(os.path.lexists(mnt + n) for n in names)
            res = collections.defaultdict(list)
            for _ in range(a.reps):
                for variant in ("as it is", "names first"):
                    drop_caches()
                    t0 = time.monotonic()
                    if variant == "names first":
                        for n in names:
                            try:
                                os.lstat(mnt + n)
                            except OSError:
                                pass
                    t_names = time.monotonic() - t0
                    t, reads = launch(a.db, name, argv, disk.dev)
                    res[variant].append((t_names, t, reads["other"]))
            print(f"{a.fs} {app}: {len(names)} names, {found} exist")
            for variant, v in res.items():
                print(f"  {variant}: names {statistics.median(x[0] for x in v) * 1000:.0f} ms, launch "
                      f"{statistics.median(x[1] for x in v):.3f} s, reads not the replayer's {statistics.median(x[2] for x in v):.0f}")
        finally:
            disk.down()


if __name__ == "__main__":
    main()
