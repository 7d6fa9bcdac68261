"""Record one cold launch: make the cache cold, trace, run CMD to its launch end, store it.

Order matters: the cache is made cold (while tracing is set up: both wait on the kernel) before
tracing starts; tracing starts before CMD is forked; tracing stops and its instances are removed
(in the background, during the warm run) before anything is resolved or written, so the
recorder writes nothing to the traced devices while tracing. The recording is stored in one
transaction at the very end, so any failure (or Ctrl-C) leaves nothing half-stored.

record_once records a launch it starts; record_running one already started (the hook learner's,
held at its exec by warmstartd). Both trace through LaunchTrace and store through
store_recording.
"""

import os
import re
import resource
import selectors
import signal
import threading
import time
from dataclasses import dataclass, field
from typing import Callable, ContextManager, Dict, List, Optional, Sequence, Set, Tuple

from ..db import recordings as store
from ..devices import block_name, sysfs_path
from ..errors import WarmstartError
from ..launching import LaunchResult, Until, devices_of_paths, launch, resolve_command
from . import coldcache
from .attribution import is_block_dev, launch_devices, launch_requests, lookups, page_adds, page_uses
from .backend import choose_backend
from .cputime import CpuCurve, assign_busy, assign_cpu
from .events import Event
from ..model import BlockRequest, Recording
from ..mountinfo import mounts
from .mapping import statement
from .opens import OpenWatch
from .resolve import resolve_inodes
from ..fs import FileSystems, fs_mount_points, lookup_parsers
from .tasks import build_tree
from .together import AtOnce
from .tracefs import Instance, clean_root

TASK_EVENTS = ("sched/sched_process_fork", "sched/sched_process_exec", "sched/sched_process_exit",
               "sched/sched_stat_runtime", "filemap/mm_filemap_add_to_page_cache")
# Page uses (attribution.page_uses). get_pages alone misses the first part of a read() whose last
# page is still being read (filemap_get_pages returns early without its tracepoint), so the
# read()'s own readahead requests (sync: the requested pages; async: from the marker page on)
# count too. Kernels without the readahead tracepoints (before 6.14) record no uses.
PAGE_USE_TRACEPOINTS = ("filemap/mm_filemap_get_pages", "filemap/mm_filemap_map_pages",
                        "filemap/mm_filemap_fault", "readahead/page_cache_sync_ra",
                        "readahead/page_cache_async_ra")


def traced_task_events(root) -> Tuple[tuple, bool]:
    """(TASK_EVENTS plus PAGE_USE_TRACEPOINTS if this kernel has all of them, plus each file
    system's lookup tracepoint it has (fs.lookup_parsers); whether it has the page-use ones)."""
    have = all((root / "events" / ev).is_dir() for ev in PAGE_USE_TRACEPOINTS)
    looks = tuple(sorted(ev for ev in lookup_parsers() if (root / "events" / ev).is_dir()))
    return TASK_EVENTS + (PAGE_USE_TRACEPOINTS if have else ()) + looks, have


@dataclass
class RecordOptions:
    until: Until = field(default_factory=lambda: Until("exit"))
    timeout: float = 60.0
    backend: str = "auto"
    cold: str = "drop_caches"
    devices: List[int] = field(default_factory=list)
    allow_failure: bool = False
    cwd: Optional[bytes] = None
    env: Optional[dict] = None
    buffer_kb: int = 8192
    passthrough: bool = True
    warm_run: bool = True      # measure the warm launch's CPU once after the recording


@dataclass
class Trace:
    """What tracing one launch gave: every block request on the system, the launch tree's task
    events, the events lost, the block backend's name, whether page uses were traced."""
    requests: List[BlockRequest]
    task_events: List[Event]
    lost_events: int
    backend: str
    uses_traced: bool
    opens: List[bytes] = field(default_factory=list)   # names opened while tracing (opens.OpenWatch)
    openers: Dict[bytes, Set[int]] = field(default_factory=dict)   # name -> pids that opened it
    opens_lost: bool = False                           # the open queue overflowed: names are missing


class LaunchTrace:
    """The tracing of one recorded launch: the block backend (every request on the system), the
    task instance (sched and filemap events of `seed` and everything it forks, event-fork) and
    the open watch. `with LaunchTrace(...) as lt:` sets all three up at once (each instance
    allocates its ring buffers); lt.start() starts tracing; lt.stop() gives the Trace and starts
    removing them, in the background and at once (each removal waits for RCU grace periods),
    while the caller goes on; leaving the `with` waits until all are removed, and removes them
    also on errors and Ctrl-C."""

    def __init__(self, root, backend: str, devices: Sequence[int], seed: int, buffer_kb: int,
                 say: Callable[[str], None]):
        self.backend = choose_backend(backend, devices, root, say)
        events, self.uses_traced = traced_task_events(root)
        self.tasks = Instance(root, "task", events, buffer_kb=buffer_kb,
                              options=("record-tgid", "event-fork"), event_pids=[seed])
        self.opens = OpenWatch(fs_mount_points())
        self._entered: list = []
        self._removal: Optional[AtOnce] = None

    def __enter__(self) -> "LaunchTrace":
        parts = [self.backend, self.tasks, self.opens]
        entering = AtOnce([p.__enter__ for p in parts])
        try:
            entering.wait()
        except BaseException:   # no __exit__ follows: remove what was set up
            self._entered = [parts[i] for i in entering.succeeded()]
            self._remove().wait()
            raise
        self._entered = parts
        return self

    def start(self) -> None:
        self.tasks.start()
        self.backend.start()

    def check(self) -> None:
        """Raise WarmstartError if tracing broke (called while the launch runs)."""
        self.backend.check()
        self.tasks.check()

    def stop(self) -> Trace:
        self.backend.stop()
        self.tasks.stop()
        trace = Trace(requests=self.backend.requests(), task_events=self.tasks.take(),
                      lost_events=self.backend.lost_events() + self.tasks.lost_events(),
                      backend=self.backend.name, uses_traced=self.uses_traced, opens=self.opens.take(),
                      openers=self.opens.openers, opens_lost=self.opens.overflow)
        self._removal = self._remove()
        return trace

    def _remove(self) -> AtOnce:
        entered, self._entered = self._entered, []
        return AtOnce([lambda p=p: p.__exit__(None, None, None) for p in entered])

    def __exit__(self, *exc):
        removal, self._removal = self._removal or self._remove(), None
        removal.wait()
        return False


class _SignalsAsInterrupt:
    """SIGTERM and SIGHUP end a recording like Ctrl-C does: cleanly, through the same guards."""

    def __enter__(self):
        self.saved = {}
        if threading.current_thread() is threading.main_thread():
            for sig in (signal.SIGTERM, signal.SIGHUP):
                self.saved[sig] = signal.signal(sig, self._raise)
        return self

    @staticmethod
    def _raise(signum, frame):
        raise KeyboardInterrupt(f"signal {signum}")

    def __exit__(self, *exc):
        for sig, handler in self.saved.items():
            signal.signal(sig, handler)
        return False


def _previous_for_evict(conn, name: str):
    """Files and metadata device ranges of the app's latest recording (for --cold=evict)."""
    app = store.get_app(conn, name)
    if app is None:
        return [], []
    recs = store.list_recordings(conn, app["id"])
    if not recs:
        return [], []
    rid = recs[-1]["id"]
    files = [f.path for f in store.load_recording_files(conn, rid) if f.path]
    ranges = []
    from .blktrace import dev_node
    for r in store.load_block_requests(conn, rid):
        if r.is_meta and not r.is_write:
            try:
                ranges.append((dev_node(r.dev), r.sector * 512, r.nr_sectors * 512))
            except WarmstartError:
                continue
    return files, ranges


def _device_env(devices: Sequence[int]) -> list:
    fstypes = {}
    for m in mounts():
        fstypes.setdefault(m.dev, m.fstype)
    out = []
    for dev in devices:
        info = {"dev": dev, "major_minor": f"{os.major(dev)}:{os.minor(dev)}", "fstype": fstypes.get(dev)}
        try:
            info["name"] = block_name(dev)
            q = f"{sysfs_path(dev)}/queue"
            if os.path.isdir(q):
                info["rotational"] = open(f"{q}/rotational").read().strip() == "1"
                info["scheduler"] = open(f"{q}/scheduler").read().strip()
        except OSError:
            pass
        out.append(info)
    return out


def record_once(conn, name: str, argv: Sequence, opts: RecordOptions,
                say: Callable[[str], None] = print) -> int:
    """Record one launch of argv as app `name`; returns the new recording's id."""
    if os.geteuid() != 0:
        raise WarmstartError("recording needs root (tracefs, drop_caches): run it with sudo")
    argv = [os.fsdecode(a) for a in argv]
    executable = resolve_command(argv, opts.cwd, opts.env)
    for sync_all in (False, True):
        got = _traced_launch(conn, name, argv, executable, opts, sync_all, say)
        if isinstance(got, tuple):
            return store_recording(conn, name, argv, executable, opts, *got)
        say(f"the launch read from {', '.join(os.fsdecode(t) for t in got)}, whose dirty pages (another "
            f"program's writes) were not all written before the cache drop; recording again after a full sync")
    raise AssertionError("a recording after a full sync is never redone")


def _traced_launch(conn, name: str, argv: List[str], executable: bytes, opts: RecordOptions, sync_all: bool,
                   say: Callable[[str], None]):
    """One traced launch: (LaunchResult, Trace, cold method, started_at, warm CPU), or the mount
    points of the file systems it read from whose dirty pages were still being written at the
    cache drop (coldcache.Writeback; never with sync_all: sync() writes all)."""
    fss = FileSystems()
    needed = _expected_file_systems(fss, argv, executable, opts, store.latest_file_devs(conn, name))
    root = clean_root(say)
    watch = list(opts.devices) or devices_of_paths([os.fsencode(a) for a in argv] + [executable])
    prev_files, prev_ranges = _previous_for_evict(conn, name) if opts.cold == "evict" else ([], [])

    def make_cold():
        writeback = None if sync_all or opts.cold == "none" else coldcache.Writeback.start(fss)
        return writeback, coldcache.make_cold(opts.cold, prev_files, prev_ranges, say, writeback, needed)
    # the cache is made cold (sync, drop: waits on the kernel) while tracing is set up (the
    # same); the set-up reads nothing from a block device. Tracing starts after both.
    cold_making = AtOnce([make_cold])
    # only the launch tree's sched/filemap events: this thread is the pid filter's seed,
    # event-fork adds CMD (forked by this thread) and everything CMD forks
    with _SignalsAsInterrupt(), LaunchTrace(root, opts.backend, watch, threading.get_native_id(),
                                            opts.buffer_kb, say) as tracing:
        [(writeback, (cold, written))] = cold_making.wait()
        started_at = time.time()
        tracing.start()
        result: LaunchResult = launch(argv, opts.until, opts.timeout, cwd=opts.cwd, env=opts.env,
                                      devices=watch, passthrough=opts.passthrough, keep_running=tracing.check)
        trace = tracing.stop()
        _refuse_bad_end(result, opts)
        if written is not None:
            unsynced = coldcache.unsynced(_devs_read(trace, result, fss), writeback.devs, written,
                                          trace.opens_lost, fss)
            if unsynced:
                return unsynced
        # while the instances are being removed (tracing is off: the warm launch is not traced)
        warm_cpu = _warm_cpu_s(argv, opts, result, watch, say) if opts.warm_run else None
    return result, trace, cold, started_at, warm_cpu


def _expected_file_systems(fss: FileSystems, argv: Sequence[str], executable: bytes, opts: RecordOptions,
                           previous: Sequence[int]) -> Set[int]:
    """Devs of the file systems a launch is expected to read: the root's, its working
    directory's, its executable's, those of the paths in its arguments (also inside one:
    `read:/x:0`, `--in=/x`, `sh -c 'cat /x'`), those on its --device, and `previous` (the page-
    cache devs of its latest recording's files)."""
    base = os.fsencode(opts.cwd) if opts.cwd else os.getcwdb()
    paths = [b"/", base, executable]
    for a in map(os.fsencode, argv):
        paths += [os.path.join(base, a)] + re.findall(rb"/[^\s:=,;'\"]*", a)
    out = {fs.mount.dev for fs in (fss.of_path(os.path.realpath(p)) for p in paths if os.path.exists(p))
           if fs is not None}
    out |= {d for d, fs in fss.items() if d in previous or opts.devices and set(opts.devices) & set(fs.devices())}
    return out


def _devs_read(trace: Trace, result: LaunchResult, fss: FileSystems) -> Set[int]:
    """Page-cache devs of what the launch's tree read: its page-cache adds' and the files it
    opened (whose pages may all have been cached: no add)."""
    tree = build_tree(trace.task_events, result.pid, result.start_ns, result.end_ns)
    devs = {a.dev for a in page_adds(trace.task_events, tree, result.start_ns, result.end_ns)}
    for name, pids in trace.openers.items():
        hit = fss.key_and_real(name) if pids & tree.tids else None
        if hit is not None:
            devs.add(hit[0][0])
    return devs


def record_running(db: Callable[[], ContextManager], name: str, pid: int, executable: bytes, argv: Sequence,
                   opts: RecordOptions, cold: str, ready: Callable[[], None], stopping: threading.Event,
                   say: Callable[[str], None] = print, owner_uid: Optional[int] = None) -> int:
    """Record process `pid`, already started (held at its exec, as warmstartd holds a launch
    to learn), from now until it exits, as app `name`; returns the new recording's id.

    The cache is left as it is (`cold` says how it was). ready() is called once tracing runs:
    the exec may be released then. db() gives a connection (as a context manager), opened only
    to store. Raises WarmstartError, storing nothing, when the process is gone before tracing
    starts, or has not exited after opts.timeout or when `stopping` is set. owner_uid: whose
    launch it is (the recording's owner, db.recordings.insert_recording)."""
    try:
        pidfd = os.pidfd_open(pid)
    except OSError as e:
        raise WarmstartError(f"process {pid} gone before tracing ({e.strerror})")
    try:
        started_at, start_ns = time.time(), time.monotonic_ns()
        root = clean_root(say)
        watch = list(opts.devices) or devices_of_paths([executable])
        with LaunchTrace(root, opts.backend, watch, pid, opts.buffer_kb, say) as tracing, \
                selectors.DefaultSelector() as exit_seen:
            tracing.start()
            ready()
            exit_seen.register(pidfd, selectors.EVENT_READ)
            deadline = time.monotonic() + opts.timeout
            exited = False
            while not exited and not stopping.is_set() and time.monotonic() < deadline:
                tracing.check()
                exited = bool(exit_seen.select(timeout=0.25))
            end_ns = time.monotonic_ns()
            trace = tracing.stop()
    finally:
        os.close(pidfd)
    if not exited:
        raise WarmstartError(f"not stored: process {pid} had not exited after {opts.timeout:g} s, "
                             f"or the recording was stopped")
    result = LaunchResult(pid=pid, start_ns=start_ns, end_ns=end_ns, end_reason="exit", exit_status=None,
                          devices=watch)
    with db() as conn:
        return store_recording(conn, name, argv, executable, opts, result, trace, cold, started_at,
                               owner_uid=owner_uid)


def _warm_cpu_s(argv, opts: RecordOptions, traced: LaunchResult, devices, say) -> Optional[float]:
    """User+sys CPU of one untraced launch right after the recording, its data now cached.

    A prefetched launch finds its data cached, so it spends about this much CPU; the traced cold
    recording overstates it (tracepoints, and the kernel's work of reading from disk), and the
    analyzer scales the recorded c_i by warm/recorded. None if the launch ends differently."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    warm = launch(argv, opts.until, opts.timeout, cwd=opts.cwd, env=opts.env, devices=devices,
                  passthrough=False)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if warm.exit_status != traced.exit_status or warm.end_reason != traced.end_reason:
        say(f"warm run ended differently ({warm.end_reason}, exit {warm.exit_status}): "
            f"its CPU is not used to calibrate the analysis")
        return None
    return (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)


def _refuse_bad_end(result: LaunchResult, opts: RecordOptions) -> None:
    cmd = "the command"
    if result.end_reason == "timeout":
        raise WarmstartError(f"{cmd} did not reach its launch end ({opts.until}) within {opts.timeout:g} s; "
                             f"nothing was stored: raise --timeout, or choose another --until (e.g. idle=1.0)")
    if result.crashed and not opts.allow_failure:
        raise WarmstartError(f"{cmd} crashed ({result.describe_exit()}) after {result.launch_time_s:.3f} s; "
                             f"nothing was stored: fix the command, or pass --allow-failure to record it anyway")
    if result.exit_status not in (None, 0) and not opts.allow_failure:
        raise WarmstartError(f"{cmd} failed ({result.describe_exit()}); nothing was stored: a failed launch "
                             f"is usually not the launch you want to prefetch. Fix the command, or pass "
                             f"--allow-failure to record it anyway")


def _on_files(fss: FileSystems, dev: int, ino: int) -> bool:
    """Is (dev, ino) a file's, rather than a block device's own cache (the bdev pseudo file
    system: an unmounted anonymous dev, the inode numbered by the block device's kernel dev_t)?
    A file of a file system not mounted here is a file: it is named as not mapped, not dropped."""
    if fss.of_dev(dev) is not None or os.major(dev) != 0:
        return True
    return not is_block_dev(os.makedev(ino >> 20, ino & 0xFFFFF))


def _fs_devices(fss: FileSystems, dev: int) -> List[int]:
    fs = fss.of_dev(dev)
    if fs is None:
        return [dev] if is_block_dev(dev) else []
    return fs.devices()


def store_recording(conn, name: str, argv: Sequence, executable: bytes, opts: RecordOptions,
                    result: LaunchResult, trace: Trace, cold: str, started_at: float,
                    warm_cpu_s: Optional[float] = None, owner_uid: Optional[int] = None) -> int:
    """Attribute the trace to the launch (its tree, window and devices), resolve its files and
    store it as a recording of app `name` in one transaction; returns its id."""
    argv = [os.fsdecode(a) for a in argv]
    raw_requests, task_events, backend_name = trace.requests, trace.task_events, trace.backend
    lost, uses_traced = trace.lost_events, trace.uses_traced
    start, end = result.start_ns, result.end_ns
    tree = build_tree(task_events, result.pid, start, end)
    fss = FileSystems()
    adds = [a for a in page_adds(task_events, tree, start, end) if _on_files(fss, a.dev, a.ino)]
    uses = [u for u in page_uses(task_events, tree, start, end) if _on_files(fss, u.dev, u.ino)] \
        if uses_traced else None
    names_looked_up = lookups(task_events, tree, start, end, lookup_parsers())
    devices = launch_devices(raw_requests, adds, tree, opts.devices, fs_devices=lambda d: _fs_devices(fss, d))
    requests = launch_requests(raw_requests, tree, devices, start, end)
    curve = CpuCurve(tree.intervals)
    tail = assign_cpu(requests, curve, start, end)
    assign_busy(requests, tree.intervals, tree.born, end, len(os.sched_getaffinity(0)))
    names = [os.fsencode(executable)] + trace.opens
    found = resolve_inodes({(a.dev, a.ino) for a in adds}, names, fss)
    files = found.files
    mapping = statement(files, found.reasons, adds, requests, fss, found.by_name, found.by_walk)
    resolved = {(f.dev, f.ino) for f in files if f.path is not None}
    data_pages = sum(a.nr_pages for a in adds)
    resolved_pages = sum(a.nr_pages for a in adds if (a.dev, a.ino) in resolved)

    def rel(t):
        return None if t is None else t - start

    for r in requests:
        r.queue_ns, r.issue_ns, r.complete_ns = rel(r.queue_ns), rel(r.issue_ns), rel(r.complete_ns)
    for a in adds:
        a.t_ns = rel(a.t_ns)
    procs = list(tree.processes.values())
    for p in procs:
        p.start_ns, p.exit_ns = rel(p.start_ns), rel(p.exit_ns)
    env = {
        "kernel": os.uname().release,
        "devices": _device_env(devices),
        "until": str(opts.until),
        "timeout_s": opts.timeout,
        "tracer": {"backend": backend_name, "buffer_kb_per_cpu": opts.buffer_kb, "trace_clock": "mono"},
        "executable": os.fsdecode(executable),
        "data_pages": data_pages,
        "resolved_data_pages": resolved_pages,
        "task_events": len(task_events),
        "name_lookups": len(names_looked_up),
        "mapping": mapping,
    }
    if uses is not None:
        env["used_pages"] = sum(u.nr_pages for u in uses)   # marks a recording that traced uses
    rec = Recording(started_at=started_at, launch_time_s=result.launch_time_s, end_reason=result.end_reason,
                    exit_status=result.exit_status, backend=backend_name, cold_method=cold, lost_events=lost,
                    cpu_total_s=curve.between(start, end) / 1e9, cpu_tail_ns=tail, warm_cpu_s=warm_cpu_s, env=env,
                    requests=requests, page_adds=adds, page_uses=uses, processes=procs, files=files,
                    lookups=names_looked_up)
    return store.insert_recording(conn, name, executable, [os.fsencode(a) for a in argv], rec, owner_uid)
