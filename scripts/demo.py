#!/usr/bin/env python3
"""`make demo`: record a real app on an emulated hard disk, analyze it, launch it cold without and
with prefetch, and print the gain. Each step is the real `warmstart` command a user would type."""

import json
import os
import shlex
import statistics
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

DEMO_DB = Path(os.environ.get("WARMSTART_DEMO_DB", "/var/lib/warmstart/demo.db"))
APP = "demo-pyimport"
# A dozen heavy standard-library modules: hundreds of small reads scattered over the disk.
MODULES = ("json email.mime.multipart http.client asyncio decimal xml.dom.minidom sqlite3 "
           "logging.handlers unittest argparse tarfile zipfile").split()
REPS = int(os.environ.get("WARMSTART_DEMO_REPS", "3"))


def say(msg):
    print(f"demo: {msg}", flush=True)


def warmstart(*args, capture=False):
    cmd = [sys.executable, "-m", "warmstart", "--db", str(DEMO_DB), *args]
    say("$ warmstart " + " ".join(shlex.quote(a) for a in args))
    proc = subprocess.run(cmd, text=True, capture_output=capture)
    if proc.returncode != 0:
        if capture:
            sys.stderr.write(proc.stdout + proc.stderr)
        sys.exit(f"demo: `warmstart {args[0]}` failed (exit {proc.returncode})")
    return proc.stdout if capture else None


def available_commands():
    from warmstart.cli import cli
    return set(cli.list_commands(None))


def main():
    if os.geteuid() != 0:
        sys.exit("demo: needs root (loop devices, FUSE, tracing, drop_caches): run `sudo make demo`")
    needed = {"record": "recorder (issue 3)", "analyze": "analyzer (issue 4)", "run": "replayer (issue 5)"}
    have = available_commands()
    try:
        from warmstart.emudisk import EmuDisk
    except ImportError as e:
        sys.exit(f"demo: the emulated disk is not built yet ({e}); nothing else can run without it")

    say("bringing up the emulated 7200 rpm disk with an aged system image (first time: builds the image)")
    disk = EmuDisk.up(name="demo", profile="hdd7200", image="system")
    try:
        argv = disk.chroot_argv(["/usr/bin/python3", "-c", "import " + ", ".join(MODULES)])
        if DEMO_DB.exists():
            for suffix in ("", "-wal", "-shm"):
                Path(str(DEMO_DB) + suffix).unlink(missing_ok=True)
        missing = [stage for cmd, stage in needed.items() if cmd not in have]
        if "record" in missing:
            say(f"not built yet: {', '.join(missing)}; stopping after the emulated disk")
            return
        warmstart("record", "--name", APP, "--", *argv)
        if "analyze" in missing:
            say(f"not built yet: {', '.join(missing)}; stopping after the recording")
            return
        warmstart("analyze", APP)
        warmstart("show", APP)
        if "run" in missing:
            say(f"not built yet: {', '.join(missing)}; stopping after the analysis")
            return
        times = {"cold": [], "reorder": [], "segmented": []}
        for rep in range(REPS):
            for mode in times:  # alternate so drift hits every mode alike
                disk.drop_caches()
                how = ["--cold"] if mode == "cold" else ["--mode", mode]
                out = warmstart("run", "--json", "--name", APP, *how, "--", *argv, capture=True)
                times[mode].append(json.loads(out)["launch_time_s"])
                say(f"rep {rep + 1}: {mode:<9} {times[mode][-1]:.3f} s")
        cold = statistics.median(times["cold"])
        reorder = statistics.median(times["reorder"])
        pre = statistics.median(times["segmented"])
        say(f"cold launch, no prefetch (median of {REPS}):       {cold:.3f} s")
        say(f"sorted fetch, then launch (median of {REPS}):      {reorder:.3f} s")
        say(f"segmented prefetch (median of {REPS}):             {pre:.3f} s")
        say(f"gain: {1 - pre / cold:.0%} shorter than cold ({cold / pre:.1f}x faster); "
            f"{pre / reorder:.2f}x the sorted fetch")
        report = json.loads(warmstart("report", "--json", APP, capture=True))["apps"]
        for s in report:
            say(f"report: {s['app']} on {s['disk']}: cold {s['cold']['median']:.3f} s, "
                f"prefetched ({s['prefetch_method']}) {s['prefetched']['median']:.3f} s, gain {s['gain']:.0%}")
        say(f"inspect: warmstart --db {DEMO_DB} report {APP}")
    finally:
        disk.down()


if __name__ == "__main__":
    main()
