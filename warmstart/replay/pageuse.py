"""Which pages a prefetched launch used: the accuracy and waste of its schedule.

    accuracy = prefetched-and-used / used        waste = prefetched-unused / prefetched

used: the pages of files on the schedule's devices that the launch's process tree touched,
      whether they were in the page cache (hit) or not (miss). Pages of files the schedule does
      not name count too: they are the schedule's misses.
prefetched: the pages of the schedule's FILE ranges the replayer covered: every file range of a
      file whose identity still matches (the replayer's own check), whether it had to read it or
      found it resident. Device ranges (metadata) are left out of all three numbers.

Use is traced with the filemap tracepoints, which (measured on 6.18, docs/replayer.md) fire on
hits as well as misses: mm_filemap_get_pages for read() (the requested index range, not clipped
to the file size: we clip it), mm_filemap_map_pages for fault-around of a mapping (the window,
clipped to the VMA and the file end), mm_filemap_fault for a page fault that fault-around did
not satisfy. A read() can go unreported from its start: the get_pages tracepoint is skipped
when its batch's last folio is still under I/O (the batch's other pages are copied, the loop asks
again from the last one), so a read that starts on a miss is taken from the page_cache_sync_ra
event its first batch fired (same request, same end), and an async_ra's window too, but only
where the same task's next use of that file is a get_pages ending where it ends (a fault's
readahead windows are the fault path's, not pages used: _read_requests). The instance follows
this thread and what it forks (set_event_pid + event-fork) and keeps only the schedule's devices
(an s_dev filter), both in the kernel; the launch's tree and time window are picked out
afterwards (as the recorder picks its page uses: attribution.used_spans of tasks.build_tree), so
the replayer's own reads never count as use.
"""

import os
import threading
from dataclasses import asdict, dataclass, field
from typing import Dict, Iterable, List, Optional, Set, Tuple

from ..recorder.events import RA_EVENTS, USE_EVENTS, Event, filemap_pages, readahead_pages
from ..recorder.tracefs import Instance, tracefs_root

PAGE = 4096
EVENTS = ("filemap/mm_filemap_get_pages", "filemap/mm_filemap_map_pages", "filemap/mm_filemap_fault",
          "readahead/page_cache_sync_ra", "readahead/page_cache_async_ra", "sched/sched_process_fork")
Pages = Dict[Tuple[int, int], Set[int]]   # (dev, ino) -> page indexes


@dataclass
class PageUse:
    used_bytes: int
    prefetched_bytes: int
    prefetched_used_bytes: int
    unscheduled_used_bytes: int          # used pages of files the schedule does not name
    used_files: int
    unscheduled_files: int
    unresolved_files: int                # unscheduled files whose size was not found (not clipped)
    events: int
    lost_events: int
    exact: bool                          # False: lost events, or the replayer skipped ranges
    notes: List[str] = field(default_factory=list)

    @property
    def accuracy(self) -> Optional[float]:
        return self.prefetched_used_bytes / self.used_bytes if self.used_bytes else None

    @property
    def waste(self) -> Optional[float]:
        return ((self.prefetched_bytes - self.prefetched_used_bytes) / self.prefetched_bytes
                if self.prefetched_bytes else None)

    def to_json(self) -> dict:
        return dict(asdict(self), accuracy=self.accuracy, waste=self.waste)


def kernel_dev(dev: int) -> int:
    """The kernel's dev_t encoding (major << 20 | minor), as the s_dev field holds it."""
    return (os.major(dev) << 20) | os.minor(dev)


def _pages(offset: int, length: int, size: Optional[int]) -> range:
    end = offset + length if size is None else min(offset + length, size)
    return range(offset // PAGE, -(-end // PAGE)) if end > offset else range(0)


def _cache_key(f, fss) -> Optional[Tuple[int, int]]:
    """(dev, ino) under which the page cache names the scheduled file f, if it passes the
    replayer's identity check (replayer/replay.c: a regular file, same dev, ino, size, mtime);
    None if not. The cache's dev is not always st_dev (btrfs: the file system's, not the
    subvolume's; overlayfs: the layer's file): fs.FileSystem.cache_key."""
    try:
        st = os.stat(f.path)
    except OSError:
        return None
    if (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns) != (f.dev, f.ino, f.size, f.mtime_ns):
        return None
    return fss.cache_key_of(f.path, st)


def prefetched_pages(schedule, fss) -> Tuple[Pages, Dict[Tuple[int, int], int]]:
    """Pages of the schedule's file ranges whose file still matches, keyed as the page cache
    names the files, and those files' sizes."""
    pages: Pages = {}
    sizes = {}
    keys = {f: _cache_key(f, fss) for f in schedule.files}
    for seg in schedule.segments:
        for r in seg.ranges:
            key = keys.get(r.file) if r.file is not None else None
            if key is None:
                continue
            sizes[key] = r.file.size
            pages.setdefault(key, set()).update(_pages(r.file_offset, r.length, r.file.size))
    return pages, sizes


def _read_requests(events: List[Event]) -> List[Event]:
    """events without the readahead events that are not a read()'s request: kept is a sync or
    async readahead whose task's next use event on the same file is a get_pages whose last page
    is the readahead's last (filemap_get_pages traces both with the read's end, and every call
    of one read() has the same end; one call can fire both a sync and an async readahead)."""
    out: List[Optional[Event]] = []
    pending: Dict[Tuple[int, int, int], List[Tuple[int, int]]] = {}   # (tid, dev, ino) -> [(slot in out, last page)]
    for ev in events:
        if ev.name in RA_EVENTS:
            ra = readahead_pages(ev.body)
            if ra is not None:
                pending.setdefault((ev.tid, ra[0], ra[1]), []).append((len(out), ra[2] + ra[3] - 1))
                out.append(ev)
            continue
        if ev.name in USE_EVENTS:
            f = filemap_pages(ev.body)
            read_last = f[2] + f[3] - 1 if f and ev.name == "mm_filemap_get_pages" else None
            for slot, last in pending.pop((ev.tid, f[0], f[1]), []) if f else []:
                if last != read_last:
                    out[slot] = None
        out.append(ev)
    for slot, _ in (p for waiting in pending.values() for p in waiting):   # no read of the file followed
        out[slot] = None
    return [ev for ev in out if ev is not None]


def used_pages(events: List[Event], root_pid: int, start_ns: int, end_ns: int) -> Tuple[Pages, int]:
    """Pages the tree of root_pid touched in [start_ns, end_ns + 1 ms] (index ranges not yet
    clipped), and the number of use events counted."""
    from ..recorder.attribution import used_spans   # only when use was traced: keeps `run` quick to start
    from ..recorder.tasks import build_tree
    tree = build_tree(events, root_pid, start_ns, end_ns)
    out: Pages = {}
    n = 0
    for dev, ino, first, npages in used_spans(_read_requests(events), tree, start_ns, end_ns + 1_000_000):
        out.setdefault((dev, ino), set()).update(range(first, first + npages))
        n += 1
    return out, n


def _sizes_near(wanted: Set[Tuple[int, int]], dirs: Iterable[bytes], fss) -> Dict[Tuple[int, int], int]:
    """Sizes of unscheduled inodes found in the scheduled files' directories (cheap: the launch
    has just looked these up). Anything else stays unresolved; a full walk of the disk after
    every launch would cost seconds on a hard disk."""
    found = {}
    for d in dirs:
        fs = fss.of_path(os.path.realpath(os.fsencode(d)))
        try:
            with os.scandir(os.fsencode(d)) as it:
                for entry in it:
                    try:
                        st = entry.stat(follow_symlinks=False)
                    except OSError:
                        continue
                    key = (st.st_dev, st.st_ino) if fs is None else fs.cache_key(entry.path, st)
                    if key in wanted:
                        found[key] = st.st_size
        except OSError:
            continue
        if len(found) == len(wanted):
            break
    return found


def measure(schedule, events: List[Event], root_pid: int, start_ns: int, end_ns: int,
            stats: Optional[dict], lost: int) -> PageUse:
    """PageUse of one launch from its trace events and the replayer's stats."""
    from ..fs import FileSystems
    fss = FileSystems()
    notes = []
    if stats is None or stats.get("status") != "ok":
        pre: Pages = {}
        sizes = {}
        notes.append("the replayer did not run to completion: nothing counts as prefetched")
    else:
        pre, sizes = prefetched_pages(schedule, fss)
    skipped = (stats or {}).get("ranges_skipped_pressure", 0)
    if skipped:
        notes.append(f"the replayer skipped {skipped} ranges under memory pressure; they are "
                     "counted as prefetched, so waste is an upper bound")
    if lost:
        notes.append(f"{lost} trace events lost: used is a lower bound")
    raw, n = used_pages(events, root_pid, start_ns, end_ns)
    unsched = {k for k in raw if k not in sizes}
    dirs = sorted({os.path.dirname(f.path) for f in schedule.files})
    sizes = {**sizes, **_sizes_near(unsched, dirs, fss)} if unsched else sizes
    used: Pages = {}
    for key, idx in raw.items():
        size = sizes.get(key)
        used[key] = idx if size is None else {i for i in idx if i * PAGE < size}
    pused = sum(len(p & used.get(k, set())) for k, p in pre.items())
    return PageUse(
        used_bytes=PAGE * sum(len(p) for p in used.values()),
        prefetched_bytes=PAGE * sum(len(p) for p in pre.values()),
        prefetched_used_bytes=PAGE * pused,
        unscheduled_used_bytes=PAGE * sum(len(used[k]) for k in unsched),
        used_files=len(used), unscheduled_files=len(unsched),
        unresolved_files=len([k for k in unsched if k not in sizes]),
        events=n, lost_events=lost, exact=not (skipped or lost), notes=notes)


class UseTracer:
    """`with UseTracer(schedule) as use:` fork the replayer and the app from this thread,
    use.stop() at the launch end, then use.measure(...). (Not measuring: runner's no-op.)"""

    def __init__(self, schedule, buffer_kb: int = 4096):
        """Takes the page cache's device of each scheduled file now (a stat of each): before the
        caller makes the cache cold (run_launch's `cold`), so the lookups warm nothing the launch
        is timed on."""
        from ..fs import FileSystems
        fss = FileSystems()
        keys = [fss.key_and_real(os.fsencode(f.path)) for f in schedule.files]
        devs = sorted({kernel_dev(f.dev) for f in schedule.files} |   # the cache's dev of each
                      {kernel_dev(k[0][0]) for k in keys if k is not None}) or [0]
        self._dev_filter = " || ".join(f"s_dev == {d}" for d in devs)
        self.schedule = schedule
        self.buffer_kb = buffer_kb
        self._inst: Optional[Instance] = None
        self._lost = 0

    def __enter__(self):
        root = tracefs_root()
        self._inst = Instance(root, "use", EVENTS, buffer_kb=self.buffer_kb, options=("event-fork",),
                              event_pids=[threading.get_native_id()],
                              filters={ev: self._dev_filter for ev in EVENTS if not ev.startswith("sched/")}).begin()
        return self

    def stop(self) -> None:
        if self._inst is not None and self._inst.reading:
            self._inst.stop()
            self._lost = self._inst.lost_events()

    def measure(self, result, stats: Optional[dict]) -> Optional[PageUse]:
        """The launch's PageUse (None if tracing never started); call after stop()."""
        if self._inst is None:
            return None
        self.stop()
        return measure(self.schedule, self._inst.take(), result.pid, result.start_ns, result.end_ns,
                       stats, self._lost)

    def __exit__(self, *exc):
        if self._inst is not None:
            self._inst.close()
        return False
