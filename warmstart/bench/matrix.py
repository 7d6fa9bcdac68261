"""`warmstart bench`: the comparison matrix, the only source of warmstart's performance claims.

For each app on the disk under test: a plain reference run, a recording (reused when it still
matches the disk), two schedules (the paper's Algorithm 1 and ours), the lower bound's sorted
pass (build/warmstart-probe, O_DIRECT), then `reps` repetitions of every mode, round-robin over
apps and modes within a repetition so drift hits all modes alike. Every launch is checked against
the reference run (exit status and output) and stored in `launches` under one bench_id.

record and analyze run in this process, once per app, through the library calls their commands
make (record_once, analyze) with the options the bench always gave those commands; their cost
is outside every measured launch. Only the run-cli mode starts the CLI, to time it as typed.
"""

import contextlib
import dataclasses
import json
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Dict, List, Optional, Sequence

from ..analyzer import kept
from ..analyzer.analyze import Options as AnalyzeOptions, analyze
from ..analyzer.bound import launch_bound, launch_bound_at_cpu
from ..analyzer.probe import check_direct, device_path
from ..devices import sysfs_path
from ..analyzer.profile import main_dev, measure, measure_through_file
from ..db import connection, launches as launches_db, open_db
from ..db.profiles import latest_profile, save_profile
from ..db.recordings import (get_app, get_recording, latest_ok_recording_id, list_recordings, load_block_requests,
                             recorded_files_on)
from ..db.schedules import activate_schedule, list_schedules
from ..errors import WarmstartError
from ..hook import manage as hook_manage
from ..hook.feedback import summarize_cold
from ..launching import parse_until
from ..paths import helper_binary
from ..recorder.coldcache import drop_caches
from ..recorder.recorder import RecordOptions, record_once
from ..replay.export import block_device_node
from ..replay.runner import NO_PREFETCH, LaunchOptions, Prefetch, StoreAs, run_launch
from ..report import stats, summary
from . import apps as appcat
from .sampler import LaunchSampler, block_name

ALL_MODES = ("cold", "cold-traced", "interleave", "reorder", "reorder-ours", "segmented-paper", "segmented", "warm",
             "run-cli", "hook")
# Not in the round-robin: made after each repetition's other modes, warmstartd running only then
# (it would hook the other modes' launches too; hookmode.py).
AFTER_EACH_REP = ("hook",)
DISKS = ("hdd7200", "ssd", "real")
# mode -> (replayer mode or "none", schedule to activate: "plain", "paper", "ours" or None).
# The papers' baselines (interleave as FAST, reorder) fetch the launch's blocks as recorded:
# "plain" is one segment without derived file metadata, gap merging or trimming to used pages. reorder-ours fetches our
# schedule whole before the launch, to tell the segmentation's gain from the request shaping's.
PLAN = {"cold": ("none", None), "warm": ("none", None), "interleave": ("interleave", "plain"),
        "reorder": ("reorder", "plain"), "reorder-ours": ("reorder", "ours"),
        "segmented-paper": ("segmented", "paper"), "segmented": ("segmented", "ours"),
        "run-cli": ("segmented", "ours")}


@dataclass
class BenchConfig:
    disk: str = "hdd7200"
    apps: List[appcat.App] = field(default_factory=list)
    reps: int = 5
    modes: Sequence[str] = ALL_MODES
    timeout: float = 120.0
    timeline: bool = True          # sample repetition 1 of each launch for the timeline figure
    markdown: Optional[Path] = None
    relocate: bool = False         # then relocate every app and measure again (relocation.py)
    relocate_one: Optional[str] = None   # first relocate this app alone and measure the others
    unknown: bool = False          # instead of the matrix: never-seen launches (unknown.py, issue 7)
    hook_launches: int = 5         # hook mode: consecutive plain launches per app
    layout: str = "packaged"       # the emulated disk's system image: emudisk.system_image.LAYOUTS
    fs: str = "ext4"               # the emulated disk's file system: emudisk.image.FILE_SYSTEMS
    overlay: bool = False          # also launch every app from an overlayfs over it (APP@overlay)
    reprofile: bool = False        # measure an emulated disk's profile even if its model has one

    @property
    def label(self) -> str:
        """The disk as launches, app names and bench ids name it: hdd7200, hdd7200.random,
        hdd7200.xfs, ssd.random.btrfs, ... (ext4, the default, unnamed as before)."""
        return ".".join([self.disk] + [x for x in (self.layout, self.fs) if x not in ("packaged", "ext4")])


OVERLAY = "@overlay"   # the suffix of an app launched from the overlayfs over the disk


class DiskUnderTest:
    """The emulated disk holding the system image (chroot) or the machine's own disk."""

    def __init__(self, kind: str, say, layout: str = "packaged", fs: str = "ext4"):
        self.kind, self.say, self.emu, self.layout, self.fs = kind, say, None, layout, fs
        self.overlay_root: Optional[Path] = None

    def __enter__(self):
        if self.kind == "real":
            self.files_dir = Path("/var/tmp/warmstart-bench")
            self.files_dir.mkdir(parents=True, exist_ok=True)
            self.fs_dev = os.stat(self.files_dir).st_dev
            self.wrap = list
            self.catalogue_dir = str(self.files_dir)
            self.dev_sectors = None
            return self
        from ..emudisk.disk import EmuDisk
        self.say(f"bringing up the emulated {self.kind} disk with the {self.layout} system image "
                 f"in {self.fs} (first time: minutes)")
        image = "system" if self.layout == "packaged" else f"system-{self.layout}"
        self.emu = EmuDisk.up(f"bench-{self.kind}-{os.getpid()}", profile=self.kind, image=image, fs=self.fs,
                              progress=self.say)
        self.files_dir = self.emu.mountpoint / appcat.FILES_DIR.lstrip("/")
        self.fs_dev = self.emu.dev
        self.wrap = self.emu.chroot_argv
        self.catalogue_dir = appcat.FILES_DIR
        size = Path("/sys/block") / block_name(self.emu.loop_dev) / "size"
        self.dev_sectors = int(size.read_text())
        return self

    def __exit__(self, *exc):
        if self.emu is not None:
            self.emu.down()
        return False

    def fstype(self) -> Optional[str]:
        """The type of the file system the apps' files are on (as mounted: ext4, xfs, btrfs, ...)."""
        from ..mountinfo import mounts
        # by the mount point holding it (a btrfs subvolume's st_dev is not its mount's device)
        path = os.fsencode(os.path.realpath(self.emu.mountpoint if self.emu else self.files_dir))
        under = [m for m in mounts() if path == m.target or path.startswith(m.target.rstrip(b"/") + b"/")]
        return max(under, key=lambda m: len(m.target)).fstype if under else None

    def mount_overlay(self) -> None:
        """The overlayfs over the disk's file system (upper and work dirs on tmpfs), as a container
        runtime mounts an image; after the apps' files are installed in the lower one."""
        self.overlay_root = self.emu.overlay()
        self.say(f"overlayfs over the {self.fs} of {self.emu.loop_dev} mounted at {self.overlay_root}")

    def argv(self, app) -> List[str]:
        """How app runs on this disk: chrooted in the system image, or in the overlay over it."""
        if app.name.endswith(OVERLAY):
            return self.emu.chroot_argv(app.argv, root=self.overlay_root)
        return self.wrap(app.argv)


def ensure_profile(conn, dut, say, reprofile: bool = False) -> Optional[dict]:
    """A device profile, as an installation has after `warmstart profile-disk`: analyze then uses
    it (hybrid probes, competitive gap merging). An emulated disk is new in every run (and its
    loop device may have held another disk model before), its model is not: the profile measured
    on the first disk of a model (~7 s on hdd7200) is kept for the machine (analyzer/kept.py) and
    stored for every later disk of that model, unless reprofile. The machine's own disk: if its
    node refuses O_DIRECT (this VM's /dev/vda does, even for root), analyze cannot probe it;
    profile it once through a file on it, so analyze uses the model. Returns where an emulated
    disk's profile came from (the bench's JSON says it), else None."""
    if dut.emu is not None:
        key = kept.key_of({"emulated": dut.emu.model_key()})
        found = None if reprofile else kept.load(key, say=say)
        if found is not None:
            prof, meta = found
            prof.device = dut.emu.loop_dev
            say(f"the emulated {dut.kind} disk's profile: measured {kept.when(meta['measured_at'])} on a disk "
                f"of this model ({meta['path']}; --reprofile measures it again)")
            save_profile(conn, dut.emu.loop_dev, dut.fs_dev, prof, 0.0)
            return {"measured_at": meta["measured_at"], "cached": meta["path"]}
        say(f"profiling the emulated {dut.kind} disk ({dut.emu.loop_dev})")
        prof, took = measure(dut.emu.loop_dev)
        save_profile(conn, dut.emu.loop_dev, dut.fs_dev, prof, took)
        now = time.time()
        kept.keep(key, prof, took, now)
        return {"measured_at": now, "cached": None}
    try:
        check_direct(device_path(dut.fs_dev))
        return None
    except WarmstartError as e:
        reason = str(e).split(":")[0]
    if latest_profile(conn, dut.fs_dev):
        return None
    say(f"{reason}: profiling the disk through a 1 GiB file in {dut.files_dir} instead")
    prof, took = measure_through_file(str(dut.files_dir))
    save_profile(conn, str(dut.files_dir), dut.fs_dev, prof, took)
    return None


def make_cold(dut) -> None:
    """Drop caches, then re-read the host-side launcher (env and chroot, with the host's libc) on
    an emulated disk: they are not part of the app, and their reads would hit the host disk, not
    the one under test (the recorder would trace them, the analyzer would probe the host disk).
    Running them with --version touches no file of the image, so the app itself stays cold."""
    drop_caches()
    if dut.emu is not None:
        for tool in ("env", "chroot"):
            subprocess.run([tool, "--version"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


@contextlib.contextmanager
def _stage(what: str):
    """A stage's user error, named as the command the bench used to run for it."""
    try:
        yield
    except WarmstartError as e:
        raise WarmstartError(f"`warmstart {what} ...` failed during bench: {e}") from e


def record(conn, name: str, argv) -> int:
    """`warmstart record --name NAME --cold none --json -- ARGV`: the recorder's call with that
    command's options and defaults (one run, until exit, 60 s timeout, a warm run, no output
    passed through, its messages unshown). The caller has made the cache cold. Returns the
    recording's id."""
    opts = RecordOptions(until=parse_until("exit"), cold="none", passthrough=False)
    with _stage(f"record --name {name}"):
        return record_once(conn, name, list(argv), opts, say=lambda msg: None)


def analyze_app(conn, name: str, **options) -> dict:
    """`warmstart analyze NAME [options] --json`: the analyzer's call with that command's
    defaults, then the hook index refresh the command makes after it. Returns its report."""
    with _stage(f"analyze {name} --algorithm {options.get('algorithm', 'optimal')}"):
        r = analyze(conn, name, AnalyzeOptions(**options))
    hook_manage.refresh_if_installed(conn)  # as the command does (a no-op unless a hook index exists)
    return r


@contextlib.contextmanager
def scratch_db():
    """A throw-away database, and the process's last-opened database as it was afterwards (error
    messages name the bench's own)."""
    last = connection.last_opened
    with tempfile.TemporaryDirectory(prefix="warmstart-bench-") as tmp:
        conn = open_db(Path(tmp) / "scratch.db")
        try:
            yield conn
        finally:
            conn.close()
            connection.last_opened = last


def recording_matches(conn, name: str, fs_dev: int) -> bool:
    """Is the app's latest recording of files on this very file system (same dev, inodes, sizes)?
    An emulated disk brought up again may get another loop device: then it must be re-recorded."""
    rid = latest_ok_recording_id(conn, name)
    if rid is None:
        return False
    files = recorded_files_on(conn, rid, fs_dev, limit=50)
    if not files:
        return False
    for path, ino, size in files:
        try:
            st = os.stat(path)
        except OSError:
            return False
        if st.st_ino != ino or (size is not None and st.st_size != size) or st.st_dev != fs_dev:
            return False
    return True


def raw_pass_s(conn, name: str, disk_dev: int, repeat: int = 3) -> Optional[dict]:
    """Time to read all of the blocks the app's latest recording read (its raw requests, on the
    disk under test: disk_dev where it has any) in one LBA-sorted O_DIRECT pass. Not a bound: the
    raw requests hold readahead the launch never used, and not what a schedule reads; with the
    warm launch it gives the old "LB", max(warm, raw pass), kept for comparison with older runs
    (and timed as they timed it, one request at a time)."""
    app = get_app(conn, name)
    recs = list_recordings(conn, app["id"]) if app else []
    if not recs:
        return None
    rid = recs[-1]["id"]
    reqs = [r for r in load_block_requests(conn, rid) if not r.is_write and r.nr_sectors > 0]
    if not reqs:
        return None
    dev = disk_dev if any(r.dev == disk_dev for r in reqs) else main_dev(conn, reqs)
    timed = timed_pass(conn, dev, [(r.sector, r.nr_sectors) for r in reqs if r.dev == dev], repeat, depths=(1,))
    return {**timed, "app_id": app["id"], "recording_id": rid}


def schedule_pass_s(conn, sched_id: int, disk_dev: int, repeat: int = 2) -> Optional[dict]:
    """Time to read exactly what schedule sched_id reads (its ranges on disk_dev, or on its most
    read device) in one LBA-sorted O_DIRECT pass: the disk part of the lower bound (bound.py)."""
    from ..db.schedules import load_schedule
    sched = load_schedule(conn, sched_id)
    ranges = [r for s in sched.segments for r in s.ranges if r.nr_sectors > 0] if sched else []
    if not ranges:
        return None
    dev = disk_dev if any(r.dev == disk_dev for r in ranges) else main_dev(conn, ranges)
    return {**timed_pass(conn, dev, [(r.sector, r.nr_sectors) for r in ranges if r.dev == dev], repeat),
            "schedule_id": sched_id, "cut": (sched.params or {}).get("bound")}


# The queue depths a sorted pass is timed at, the faster one counting: one request at a time is an
# HDD's best (its head streams through the sorted list); an SSD serves requests in parallel, and a
# prefetch with many in flight (the replayer's) beats any one-at-a-time pass there (emulated ssd,
# git's schedule of 1646 ranges: 0.278 s at depth 1 against a hooked launch of 0.113 s).
PASS_DEPTHS = (1, 32)


def timed_pass(conn, dev: int, extents, repeat: int = 3, depths=PASS_DEPTHS) -> dict:
    """One LBA-sorted O_DIRECT pass over extents [(sector, nr_sectors)] of dev (overlapping or
    touching ones read once), median of `repeat` runs of warmstart-probe at each of `depths`, the
    fastest (`depth` says which); where the node refuses O_DIRECT (this VM's own disk), the
    stored profile's estimate, marked "modelled"."""
    ranges, end = [], -1
    for sector, nr in sorted(extents):
        if ranges and sector <= end:  # overlapping or adjacent requests read once
            ranges[-1][1] = max(end, sector + nr) - ranges[-1][0]
        else:
            ranges.append([sector, nr])
        end = ranges[-1][0] + ranges[-1][1]
    node = os.fsdecode(block_device_node(dev))
    info = {"bytes": sum(n for _, n in ranges) * 512, "ranges": len(ranges), "device": node}
    try:
        check_direct(node)
    except WarmstartError as e:
        prof = latest_profile(conn, dev)
        if prof is None:
            raise
        t = prof[1].access_time([(dev, s * 512, n * 512) for s, n in ranges])
        return {**info, "seconds": t, "modelled": f"{str(e).split(':')[0]}; estimated by profile #{prof[0]}"}
    by_depth = {}
    with tempfile.NamedTemporaryFile("w", suffix=".ranges") as f:
        f.write("".join(f"{s * 512} {n * 512}\n" for s, n in ranges))
        f.flush()
        for qd in depths:
            r = subprocess.run([str(helper_binary("warmstart-probe")), "-q", str(qd), "-r", str(repeat), "-f", f.name,
                                node], capture_output=True, text=True, timeout=600)
            if r.returncode != 0:
                raise WarmstartError(f"warmstart-probe failed on {node}: {r.stderr.strip()}")
            out = json.loads(r.stdout)
            by_depth[qd] = stats.spread(x / 1e9 for x in out.get("runs") or [out["elapsed_ns"]]).median
    depth = min(by_depth, key=by_depth.get)
    return {**info, "seconds": by_depth[depth], "depth": depth, "by_depth": by_depth}


def _segment_ends(replay: Optional[dict]) -> list:
    """Monotonic end times of the replayer's segments (its stats give them from its start)."""
    if not replay or not replay.get("segments"):
        return []
    base = replay.get("start_mono_ns") or 0
    return [base + s["t_end_ns"] if s["t_end_ns"] < base else s["t_end_ns"]
            for s in replay["segments"] if s.get("t_end_ns")]


def run_bench(conn, db_path, cfg: BenchConfig, say: Callable[[str], None] = print,
              progress: Optional[Callable[[str], None]] = None) -> dict:
    """Run the whole matrix; returns the JSON document (also the source of the markdown)."""
    _check_config(cfg)
    bench_id = time.strftime("%Y%m%d-%H%M%S-") + cfg.label
    tick = progress or (lambda label: None)
    doc = {"bench_id": bench_id, "disk": cfg.label, "disk_kind": cfg.disk, "layout": cfg.layout, "fs": cfg.fs,
           "overlay": cfg.overlay, "reps": cfg.reps, "modes": list(cfg.modes),
           "started_at": time.time(), "kernel": os.uname().release, "apps": {}, "problems": []}
    until = parse_until("exit")
    with DiskUnderTest(cfg.disk, say, cfg.layout, cfg.fs) as dut:
        doc["fs"] = dut.fstype()   # as mounted, the real disk's too
        doc["disk_profile"] = ensure_profile(conn, dut, say, cfg.reprofile)
        apps = _install_apps(cfg, dut)
        if cfg.unknown:
            from . import unknown
            doc["modes"] = [unknown.mode_of(m) for m in unknown.MECHS]
            doc["unknown"] = unknown.run_unknown(conn, cfg, dut, doc, bench_id, apps, until, make_cold, tick, say)
            apps = []  # never seen: no recording, schedule or matrix
        prepared = {}
        for app in apps:
            prepared[app.name] = _prepare_app(conn, cfg, dut, bench_id, app, until, say)
            doc["apps"][app.name] = prepared[app.name][4]
            tick(f"prepared {app.name}")
        if prepared:
            _run_matrix(conn, db_path, cfg, dut, doc, bench_id, prepared, until, tick, say)
    doc["finished_at"] = time.time()
    _add_results(conn, cfg, doc, bench_id)
    if cfg.markdown:
        from ..report.markdown import write_markdown
        write_markdown(doc, cfg.markdown)
    return doc


def _check_config(cfg: BenchConfig) -> None:
    """Fail before any disk comes up: not root, or an option the bench cannot honour."""
    if os.geteuid() != 0:
        raise WarmstartError("bench needs root (emulated disks, drop_caches, tracefs): run it as root")
    if cfg.disk not in DISKS:
        raise WarmstartError(f"unknown --disk {cfg.disk!r}: use one of {', '.join(DISKS)}")
    bad = [m for m in cfg.modes if m not in ALL_MODES]
    if bad or not cfg.modes:
        raise WarmstartError(f"unknown mode {', '.join(bad) or '(none)'}: use some of {', '.join(ALL_MODES)}")
    if cfg.reps < 1:
        raise WarmstartError("--reps must be at least 1")
    from . import relocation
    relocation.check_config(cfg)
    if cfg.layout != "packaged" and cfg.disk == "real":
        raise WarmstartError("--layout applies to the emulated disks: the real disk has its own layout")
    from ..emudisk.image import FILE_SYSTEMS
    if cfg.fs not in FILE_SYSTEMS:
        raise WarmstartError(f"unknown --fs {cfg.fs!r}: use one of {', '.join(FILE_SYSTEMS)}")
    if cfg.disk == "real" and (cfg.fs != "ext4" or cfg.overlay):
        raise WarmstartError("--fs and --overlay apply to the emulated disks: the real disk has its own "
                             "file system; use --disk hdd7200 or ssd")
    if cfg.overlay and (cfg.unknown or cfg.relocate or cfg.relocate_one):
        raise WarmstartError("--overlay cannot be combined with --unknown or --relocate: it adds recorded apps "
                             "to the matrix, and relocating files under a mounted overlay is undefined")


def _install_apps(cfg: BenchConfig, dut) -> List[appcat.App]:
    """cfg's apps, a built-in one as the disk's catalogue defines it, with their files installed."""
    catalogue = {a.name: a for a in cfg.apps}
    if any(a.builtin for a in cfg.apps):
        builtin = appcat.catalogue(dut.catalogue_dir)
        catalogue.update({n: builtin[n] for n, a in catalogue.items() if a.builtin})
    apps = list(catalogue.values())
    appcat.install_files(apps, dut.files_dir)
    if cfg.overlay:   # the same apps again, launched from the overlay over the disk
        dut.mount_overlay()
        apps += [dataclasses.replace(a, name=a.name + OVERLAY) for a in apps]
    return apps


def _quiet(cfg: BenchConfig, until) -> LaunchOptions:
    """How the bench launches: output captured (compared with the reference run's), its timeout."""
    return LaunchOptions(until, cfg.timeout, passthrough=False)


def _prepare_app(conn, cfg: BenchConfig, dut, bench_id: str, app, until, say) -> tuple:
    """Everything the matrix needs of app, outside every measured launch: its reference run, a
    recording (reused when it still matches the disk), the schedules its modes replay and its
    sorted pass.
    Returns (app, name, argv, reference outcome, info for the document)."""
    name = f"{app.name}-{cfg.label}"
    argv = dut.argv(app)
    make_cold(dut)
    ref = run_launch(conn, argv, NO_PREFETCH, _quiet(cfg, until), store=None)
    if ref.end_reason == "timeout":
        raise WarmstartError(f"{app.name} did not finish within {cfg.timeout:.0f} s in a plain run: "
                             f"check the command ({' '.join(app.argv)[:80]})")
    info = {"name": name, "argv": app.argv, "reference": {"exit_status": ref.exit_status,
                                                          "output_bytes": len(ref.output)}}
    if recording_matches(conn, name, dut.fs_dev):
        info["recorded"] = "reused"
    else:
        say(f"recording {name}")
        make_cold(dut)
        record(conn, name, argv)
        info["recorded"] = "now"
    info["schedules"] = _analyze(conn, name, schedule_kinds(cfg.modes), say)
    info["raw_pass"] = rp = raw_pass_s(conn, name, dut.fs_dev)
    info["schedule_pass"] = sp = schedule_pass_s(conn, info["schedules"]["ours"], dut.fs_dev)
    if rp:   # for the report's lower-bound marks (this bench's own: bench_id)
        launches_db.insert_sorted_pass(conn, app_id=rp["app_id"], seconds=rp["seconds"], nbytes=rp["bytes"],
                                       ranges=rp["ranges"], disk=cfg.label, recording_id=rp["recording_id"],
                                       bench_id=bench_id, modelled=rp.get("modelled") or (sp or {}).get("modelled"),
                                       schedule_id=(sp or {}).get("schedule_id"),
                                       schedule_pass_s=(sp or {}).get("seconds"),
                                       cut_bound_s=((sp or {}).get("cut") or {}).get("seconds"))
    return app, name, argv, ref, info


# kind of schedule -> (its algorithm, analyze's options for it); "ours" last: analyze leaves it active
SCHEDULE_KINDS = {"plain": ("reorder", dict(algorithm="reorder", file_metadata=False, gap_merge=False,
                                            trim_unused=False)),
                  "paper": ("paper", dict(algorithm="paper")),
                  "ours": ("optimal", {})}


def schedule_kinds(modes: Sequence[str]) -> List[str]:
    """The schedules the modes replay (PLAN), "ours" always (the hook, the bound, the pass)."""
    wanted = {PLAN[m][1] for m in modes if m in PLAN and PLAN[m][1]} | {"ours"}
    return [k for k in SCHEDULE_KINDS if k in wanted]


def _analyze(conn, name: str, kinds: Sequence[str], say) -> dict:
    """The schedules of these kinds analyzed now: "plain" (the launch's blocks as recorded),
    "paper" (Algorithm 1), "ours"; kind -> schedule id."""
    say(f"analyzing {name} ({', '.join(kinds)})")
    for kind in kinds:
        analyze_app(conn, name, **SCHEDULE_KINDS[kind][1])
    scheds = list_schedules(conn, name)
    ids = {}
    for kind in kinds:
        sid = max((s["id"] for s in scheds if s["algorithm"] == SCHEDULE_KINDS[kind][0]), default=None)
        if sid is None:
            raise WarmstartError(f"analyze stored no {kind} schedule for {name}: "
                                 f"run `warmstart analyze {name}` to see why")
        ids[kind] = sid
    return ids


def _run_matrix(conn, db_path, cfg: BenchConfig, dut, doc: dict, bench_id: str, prepared: dict, until,
                tick, say) -> None:
    """reps repetitions of every mode, round-robin over apps and modes, each repetition ending with
    its share of the hook launches (hookmode.py); then relocation if asked. Leaves our
    algorithm's schedule active, as analyze does."""
    from . import relocation
    from .hookmode import HookMode
    with (HookMode(conn, cfg, dut, doc, bench_id, prepared, make_cold, activate_schedule, tick, say)
          if "hook" in cfg.modes else contextlib.nullcontext()) as hook:
        for rep in range(cfg.reps):
            for app, name, argv, ref, info in prepared.values():
                for mode in [m for m in cfg.modes if m not in AFTER_EACH_REP]:
                    relocation.counted(conn, dut, bench_id, mode, lambda: _measure(
                        conn, db_path, cfg, dut, doc, bench_id, rep, app, name, argv, ref, info, mode, until))
                    tick(f"rep {rep + 1} {app.name} {mode}")
            if hook is not None:
                hook.rep(rep)
    for _, name, _, _, info in prepared.values():
        activate_schedule(conn, name, info["schedules"]["ours"])
    if cfg.relocate or cfg.relocate_one:
        doc["relocation"] = relocation.run_relocation(conn, db_path, cfg, dut, doc, bench_id, prepared,
                                                      until, _measure, tick, say)


# methods whose launches prefetched (summary.method_of): each at least its LB
PREFETCHED = ("interleave", "reorder", "reorder-ours", "segmented-paper", "segmented", "hook")


def launch_cpu_s(row: dict) -> Optional[float]:
    """A launch row's app CPU time (user + system, from wait4 at its exit), None if not known."""
    d = row["details"] or {}
    return (d.get("bench") or {}).get("app_cpu_s") or d.get("app_cpu_s")


def _vs_bound_at_cpu(rows: list, cut: Optional[float], sp: dict) -> Dict[str, List[float]]:
    """method -> launch time / LB at that launch's CPU (bound.launch_bound_at_cpu, scaled from
    the fastest warm launch and its CPU time), for each prefetched launch of one app with its CPU
    known."""
    warm = [r for r in rows if r["method"] == "warm" and r["launch_time_s"] is not None and launch_cpu_s(r)]
    if not warm:
        return {}
    w = min(warm, key=lambda r: r["launch_time_s"])
    fetch = (sp.get("cut") or {}).get("fetch_s")
    out: Dict[str, List[float]] = {}
    for r in rows:
        if r["method"] not in PREFETCHED or r["launch_time_s"] is None:
            continue
        x = stats.ratio(r["launch_time_s"], launch_bound_at_cpu(launch_cpu_s(r), launch_cpu_s(w), cut,
                                                                w["launch_time_s"], sp.get("seconds"), fetch))
        if x is not None:
            out.setdefault(r["method"], []).append(x)
    return out


def launch_steal_s(row: dict) -> Optional[float]:
    """The CPU time the hypervisor took from this machine during a launch (launching.host_steal_s,
    all its CPUs), None if not known (rows from before 2026-12-03)."""
    d = row["details"] or {}
    return (d.get("bench") or {}).get("host_steal_s", d.get("host_steal_s"))


def _hook_vs_cold(rows: list) -> dict:
    """One app's hooked launches against its cold ones (issue 22's "never slower than no
    prefetch"): the worst hooked launch over the cold median, raw and at its CPU (the cold
    launches' median time off the CPU, launch time - app CPU time, plus this launch's own CPU
    time: the part a prefetch can change, with the host's CPU speed of that launch; for a
    CPU-bound launch the host's speed moves the raw ratio by more than any prefetch does), the
    host's steal during the worst one, and how many of its last hooked launches in a row were
    slower than the cold median."""
    cold = [r for r in rows if r["method"] == "cold" and r["launch_time_s"] is not None]
    hook = [r for r in rows if r["method"] == "hook" and r["launch_time_s"] is not None]
    out = {"hook_worst_vs_cold": None, "hook_worst_vs_cold_at_cpu": None, "hook_worst_steal_s": None,
           "hook_slow_at_end": 0}
    if not cold or not hook:
        return out
    ref = summarize_cold([(r["launch_time_s"], launch_cpu_s(r)) for r in cold], "bench cold launches")
    med = ref["median_s"]
    worst = max(hook, key=lambda r: r["launch_time_s"])
    out["hook_worst_vs_cold"], out["hook_worst_steal_s"] = worst["launch_time_s"] / med, launch_steal_s(worst)
    if "off_cpu_median_s" in ref:
        at_cpu = [stats.ratio(r["launch_time_s"], ref["off_cpu_median_s"] + launch_cpu_s(r))
                  for r in hook if launch_cpu_s(r) is not None]
        out["hook_worst_vs_cold_at_cpu"] = max((x for x in at_cpu if x is not None), default=None)
    for r in reversed(hook):
        if r["launch_time_s"] <= med:
            break
        out["hook_slow_at_end"] += 1
    return out


def _add_results(conn, cfg: BenchConfig, doc: dict, bench_id: str) -> None:
    """The stored launches' summaries: the matrix's, or the unknown launches', and relocation's."""
    doc["results"] = {} if cfg.unknown else results(conn, bench_id, doc)
    if cfg.unknown:
        from . import unknown
        doc["unknown"]["results"] = unknown.results(conn, bench_id)
    if "relocation" in doc:
        from . import relocation
        doc["relocation"]["results"] = relocation.results(conn, bench_id, doc)


def _measure(conn, db_path, cfg, dut, doc, bench_id, rep, app, name, argv, ref, info, mode, until):
    """One measured launch of app in mode, checked against the reference run and stored."""
    if mode == "cold-traced":
        # The recorder's own cold launch, traced, stored in a scratch database: its tracing overhead.
        with scratch_db() as scratch:
            make_cold(dut)
            rec = get_recording(scratch, record(scratch, name, argv))
            t, status = rec["launch_time_s"], rec["exit_status"]
        if t is None:
            doc["problems"].append(f"{app.name} cold-traced: the recording has no launch_time_s")
            return
        launches_db.insert_launch(conn, app_id=get_app(conn, name)["id"], mode="cold-traced", disk=cfg.label,
                                  launch_time_s=float(t), exit_status=status, bench_id=bench_id,
                                  details={"rep": rep, "source": "warmstart record (scratch db)"})
        if status is not None and status != ref.exit_status:
            doc["problems"].append(f"{app.name} cold-traced rep {rep + 1}: exit status {status}, "
                                   f"plain run {ref.exit_status}")
        return
    rmode, algorithm = PLAN[mode]
    if algorithm:
        activate_schedule(conn, name, info["schedules"][algorithm])
    if mode == "run-cli":
        _measure_cli_run(conn, db_path, cfg, dut, doc, bench_id, rep, app, name, argv, ref)
        return
    if mode == "warm":
        run_launch(conn, argv, NO_PREFETCH, _quiet(cfg, until), store=None, name=name)
    sampler = None
    if cfg.timeline and rep == 0:
        sampler = LaunchSampler(block_name(dut.emu.loop_dev) if dut.emu else _host_block(dut.fs_dev),
                                dut.emu.dev if dut.emu else dut.fs_dev)
    sampling = []

    def just_before_launch():   # run_launch calls it once all its preparation is done
        if mode != "warm":
            make_cold(dut)
        if sampler:
            sampling.append(sampler.__enter__())

    try:
        # accuracy/waste (docs/replayer.md) in repetition 1 only: tracing the
        # app's page uses costs it CPU (python: 0.124 s after release, not 0.084)
        prefetch = Prefetch(rmode, measure_use=rmode != "none" and rep == 0)
        out = run_launch(conn, argv, prefetch, _quiet(cfg, until),
                         StoreAs(mode if rmode == "none" else None, cfg.label, bench_id), name=name,
                         cold=just_before_launch)
    finally:
        if sampling:
            sampler.__exit__(None, None, None)
    replay = out.replay_stats
    if sampler and out.launch_id:
        t0 = (replay or {}).get("start_mono_ns") or sampler.start_ns
        launches_db.set_launch_timeline(conn, out.launch_id,
                                        sampler.timeline(dut.dev_sectors, _segment_ends(replay), t0))
    where = f"{app.name} {mode} rep {rep + 1}"
    if out.exit_status != ref.exit_status:
        doc["problems"].append(f"{where}: exit status {out.exit_status}, plain run {ref.exit_status}")
    elif out.output != ref.output:
        doc["problems"].append(f"{where}: output differs from the plain run's")
    if rmode != "none" and not out.prefetched:
        doc["problems"].append(f"{where}: not prefetched ({'; '.join(out.notes)})")


def _measure_cli_run(conn, db_path, cfg, dut, doc, bench_id, rep, app, name, argv, ref):
    """`warmstart run --json -- CMD` as a user (or a script) types it, timed from outside: the
    installed command's start-up counts; run finds the app by its command line, as for a user."""
    make_cold(dut)
    t0 = time.monotonic()
    p = subprocess.run([*_installed_cli(), "run", "--json", "--", *argv], capture_output=True, timeout=cfg.timeout,
                       env={**os.environ, "WARMSTART_DB": str(db_path)})
    outside = time.monotonic() - t0
    where = f"{app.name} run-cli rep {rep + 1}"
    try:
        reported = json.loads(p.stdout)
    except ValueError:
        doc["problems"].append(f"{where}: `warmstart run` printed no JSON (exit {p.returncode}): {p.stderr[-300:]!r}")
        return
    launches_db.insert_launch(conn, app_id=get_app(conn, name)["id"], mode="run-cli", disk=cfg.label,
                              launch_time_s=outside, exit_status=reported.get("exit_status"), bench_id=bench_id,
                              details={"rep": rep, "reported_launch_time_s": reported.get("launch_time_s"),
                                       "startup_overhead_s": outside - (reported.get("launch_time_s") or 0)})
    if reported.get("exit_status") != ref.exit_status:
        doc["problems"].append(f"{where}: exit status {reported.get('exit_status')}, plain run {ref.exit_status}")
    if reported.get("app_name") != name or not reported.get("prefetched"):
        doc["problems"].append(f"{where}: run prefetched app {reported.get('app_name')!r}: "
                               f"{'; '.join(reported.get('notes') or []) or 'not prefetched'}")


def _installed_cli() -> List[str]:
    """The `warmstart` a user types: the console script installed beside this interpreter (not a
    version manager's shim in front of it), else `python -m warmstart`."""
    script = os.path.join(os.path.dirname(sys.executable), "warmstart")
    return [script] if os.access(script, os.X_OK) else [sys.executable, "-m", "warmstart"]


def _host_block(fs_dev: int) -> str:
    """sysfs name of the whole disk holding a host file system (for io_ticks)."""
    part = os.path.realpath(sysfs_path(fs_dev))
    parent = os.path.dirname(part)
    return os.path.basename(parent if os.path.exists(os.path.join(parent, "stat")) and
                            os.path.exists(os.path.join(part, "partition")) else part)


def _t_exp(conn, sched_id: Optional[int]) -> Optional[float]:
    from ..db.schedules import load_schedule
    sched = load_schedule(conn, sched_id) if sched_id else None
    return sched.t_exp_s if sched else None


def results(conn, bench_id: str, doc: dict) -> dict:
    """Per app: medians, min-max, ratios to cold, the lower bound (analyzer/bound.py: cut bound,
    warm median, our schedule's sorted pass) beside our t_exp, and the comparisons the issue asks for."""
    rows = summary.load_launches(conn, bench_id=bench_id)
    out = {}
    for s in summary.summarize(rows, prefetch_method="segmented"):
        base = s["app"].rsplit("-", 1)[0]
        info = doc["apps"].get(base, {})
        m = {k: v["median"] for k, v in s["methods"].items()}
        raw = (info.get("raw_pass") or {}).get("seconds")
        sp = info.get("schedule_pass") or {}
        cut = (sp.get("cut") or {}).get("seconds")
        lb = launch_bound(cut, (s["methods"].get("warm") or {}).get("min"), sp.get("seconds"),
                          (sp.get("cut") or {}).get("fetch_s"))
        t_exp = _t_exp(conn, (info.get("schedules") or {}).get("ours"))
        at_cpu = _vs_bound_at_cpu([r for r in rows if r["app"] == s["app"]], cut, sp) if lb is not None else {}
        baselines = [x for x in (m.get("reorder"), m.get("interleave")) if x is not None]
        best_baseline = min(baselines) if baselines else None
        out[base] = {
            "app": s["app"], "methods": s["methods"], "bound_s": lb, "cut_bound_s": cut,
            "cut_fetch_s": (sp.get("cut") or {}).get("fetch_s"),
            "schedule_pass_s": sp.get("seconds"), "t_exp_s": t_exp, "raw_pass_s": raw,
            "warm_or_raw_pass_s": stats.warm_or_raw_pass(m.get("warm"), raw),
            "failed_launches": s["failed_launches"],
            "segmented_vs_reorder": stats.ratio(m.get("segmented"), m.get("reorder")),
            "segmented_vs_reorder_ours": stats.ratio(m.get("segmented"), m.get("reorder-ours")),
            "segmented_paper_vs_reorder": stats.ratio(m.get("segmented-paper"), m.get("reorder")),
            "segmented_vs_bound": stats.ratio(m.get("segmented"), lb),
            "hook_vs_bound": stats.ratio(m.get("hook"), lb),
            "segmented_vs_bound_at_cpu": stats.median(at_cpu.get("segmented", [])),
            "hook_vs_bound_at_cpu": stats.median(at_cpu.get("hook", [])),
            # the bound's check: no launch that prefetched below its LB at its CPU
            "prefetched_min_vs_bound_at_cpu": min((x for v in at_cpu.values() for x in v), default=None),
            "reorder_ours_vs_bound": stats.ratio(m.get("reorder-ours"), lb),
            "segmented_vs_cold": stats.ratio(m.get("segmented"), m.get("cold")),
            "segmented_vs_best_baseline": stats.ratio(m.get("segmented"), best_baseline),
            "tracing_overhead": stats.ratio(m.get("cold-traced"), m.get("cold")),
            "hook_vs_best_reorder": stats.ratio(m.get("hook"), min(
                [x for x in (m.get("reorder"), m.get("reorder-ours")) if x is not None], default=None)),
            "hook_vs_cold": stats.ratio(m.get("hook"), m.get("cold")),
            "run_cli_overhead_s": stats.median([(r["details"] or {}).get("startup_overhead_s") for r in rows
                                           if r["app"] == s["app"] and r["mode"] == "run-cli"]),
            "hook_outcomes": info.get("hook_outcomes"),
            **_hook_vs_cold([r for r in rows if r["app"] == s["app"]]),
        }
    for base, r in out.items():   # an overlay launch against the same launch from the lower fs
        lower = out.get(base[:-len(OVERLAY)]) if base.endswith(OVERLAY) else None
        if lower is not None:
            r["overlay_vs_lower"] = {m: stats.ratio(v["median"], (lower["methods"].get(m) or {}).get("median"))
                                     for m, v in r["methods"].items()}
    return out
