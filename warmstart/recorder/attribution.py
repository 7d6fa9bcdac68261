"""Which block requests and page-cache adds belong to the launch (rules in docs/recording.md).

A request belongs to the launch when it was issued within [start, end] and
  - its submitter (the task that queued its first bio) is in the launch's task tree, or
  - its submitter is a kernel thread (kworker, kblockd, loop workers, jbd2, irq context = pid 0)
    and it is on one of the launch's devices.
User tasks outside the tree (the recorder itself, other programs) never count.
Kernel-thread requests on the device under a launch loop device (where its backing file lives)
are that loop device's own reads and writes, already recorded on the loop device: they do not
count, or the launch's I/O would be counted twice.
The launch's devices are the block devices given with --device plus every block device on
which a task of the tree queued a request or added a page to the page cache.
"""

import os
import re
from typing import Callable, Dict, Iterable, Iterator, List, Optional, Sequence, Set, Tuple

from .events import RA_EVENTS, USE_EVENTS, Event, filemap_pages, readahead_pages
from ..devices import disk_of, is_block_device, size_bytes, stack_below, sysfs_path
from ..model import BlockRequest, PageAdd, UsedRun
from .tasks import TaskTree

PF_KTHREAD = 0x00200000
_KTHREAD_COMM = re.compile(r"^(kworker|kblockd|loop\d|jbd2|kswapd|ksoftirqd|kthreadd|writeback|irq/|"
                           r"rcu|migration|kcompactd|khugepaged|<idle>|swapper)")


class KernelThreads:
    """Is a tid a kernel thread? Asked of /proc while it lives, by name once it is gone."""

    def __init__(self):
        self._cache: Dict[int, bool] = {0: True}

    def __call__(self, tid: Optional[int], comm: Optional[str]) -> bool:
        if tid is None:
            return False
        if tid not in self._cache:
            try:
                with open(f"/proc/{tid}/stat", "rb") as f:
                    stat = f.read()
                flags = int(stat[stat.rindex(b")") + 2:].split()[6])
                self._cache[tid] = bool(flags & PF_KTHREAD)
            except (OSError, ValueError, IndexError):
                self._cache[tid] = bool(comm and _KTHREAD_COMM.match(comm))
        return self._cache[tid]


def is_block_dev(dev: int) -> bool:
    return is_block_device(dev)


def page_adds(events: Iterable[Event], tree: TaskTree, start_ns: int, end_ns: int) -> List[PageAdd]:
    """Pages added by the launch's tasks, merged into runs of consecutive indexes of one file."""
    runs: List[PageAdd] = []
    open_run: Dict[Tuple[int, int], PageAdd] = {}
    for ev in events:
        if ev.name != "mm_filemap_add_to_page_cache" or ev.tid not in tree.tids:
            continue
        if not (start_ns <= ev.ts_ns <= end_ns):
            continue
        f = filemap_pages(ev.body)
        if f is None:
            continue
        dev, ino, index, n = f
        key = (dev, ino)
        last = open_run.get(key)
        if last is not None and last is runs[-1] and last.first_index + last.nr_pages == index:
            last.nr_pages += n  # extends the most recent run: keep the order of first touches
            continue
        run = PageAdd(t_ns=ev.ts_ns, dev=dev, ino=ino, first_index=index, nr_pages=n, tid=ev.tid)
        runs.append(run)
        open_run[key] = run
    return runs


def lookups(events: Iterable[Event], tree: TaskTree, start_ns: int, end_ns: int,
            parsers: Dict[str, Callable[[bytes], Optional[Tuple[int, int, bytes]]]]) -> List[Tuple[int, int, bytes]]:
    """The names the launch's tasks looked up that missed the dentry cache, once each in the order
    first seen: (dev_t, directory inode, name), from the file systems' lookup tracepoints
    (parsers: "system/event" -> FileSystem.parse_lookup, fs.lookup_parsers)."""
    parsers = {ev.rsplit("/", 1)[-1]: parse for ev, parse in parsers.items()}
    seen: Dict[Tuple[int, int, bytes], None] = {}
    for ev in events:
        parse = parsers.get(ev.name)
        if parse is None or ev.tid not in tree.tids or not (start_ns <= ev.ts_ns <= end_ns):
            continue
        got = parse(ev.body)
        if got is not None:
            seen.setdefault(got)
    return list(seen)


def page_uses(events: Iterable[Event], tree: TaskTree, start_ns: int, end_ns: int) -> List[UsedRun]:
    """Pages the launch's tasks used, merged into runs per file (get_pages ranges are the request,
    not clipped to the file size: the analyzer only keeps pages the launch also read)."""
    spans: Dict[Tuple[int, int], List[Tuple[int, int]]] = {}
    for dev, ino, first, n in used_spans(events, tree, start_ns, end_ns):
        spans.setdefault((dev, ino), []).append((first, first + n - 1))
    return [UsedRun(dev, ino, lo, hi - lo + 1)
            for (dev, ino), lst in sorted(spans.items()) for lo, hi in merge_runs(lst)]


def used_spans(events: Iterable[Event], tree: TaskTree, start_ns: int,
               end_ns: int) -> Iterator[Tuple[int, int, int, int]]:
    """(dev, ino, first page, pages) of each page-use event of the launch's tasks in [start_ns,
    end_ns]: the recorder's page uses, and the page-use tracer's of a prefetched launch."""
    for ev in events:
        if ev.tid not in tree.tids or not (start_ns <= ev.ts_ns <= end_ns):
            continue
        if ev.name in USE_EVENTS:
            f = filemap_pages(ev.body)
            if f is None:
                continue
            yield f
        elif ev.name in RA_EVENTS:   # the pages a read() asked for (an mmap's: its whole window)
            f = readahead_pages(ev.body)
            if f is not None:
                yield f


def merge_runs(spans: Iterable[Tuple[int, int]]) -> List[Tuple[int, int]]:
    """Inclusive (first, last) page spans as sorted disjoint runs; overlapping or adjacent ones join."""
    out: List[List[int]] = []
    for a, b in sorted(spans):
        if out and a <= out[-1][1] + 1:
            out[-1][1] = max(out[-1][1], b)
        else:
            out.append([a, b])
    return [(a, b) for a, b in out]


def launch_devices(requests: Sequence[BlockRequest], adds: Sequence[PageAdd], tree: TaskTree,
                   given: Sequence[int], fs_devices=None) -> List[int]:
    """The launch's block devices (see the module's doc). fs_devices(dev) gives the block devices
    of the file system whose page-cache events carry dev (btrfs's anonymous 0:N -> its device
    list; overlayfs -> none), so a launch reading only btrfs files still has its disk."""
    devs = list(given)
    for r in requests:
        if r.tid in tree.tids and r.dev not in devs:
            devs.append(r.dev)
    for dev in dict.fromkeys(a.dev for a in adds):
        for d in (fs_devices(dev) if fs_devices else [dev] if is_block_dev(dev) else []):
            if d not in devs:
                devs.append(d)
    return devs


def lower_devices(devices: Sequence[int]) -> Set[int]:
    """Devices holding the backing files of the loop devices among `devices`."""
    out = set()
    for dev in devices:
        try:
            with open(sysfs_path(dev) + "/loop/backing_file", "rb") as f:
                backing = f.read().rstrip(b"\n")
            out.add(os.stat(backing).st_dev)
        except OSError:
            continue
    return out


def stacked_below(devices: Sequence[int], sys_root: str = "/sys") -> List[Tuple[int, int, int]]:
    """(dev, first sector, end sector) of everything under the launch's stacked devices (dm-crypt,
    LVM, md: /sys/block/*/slaves; a slave partition also as its sectors of the whole disk): a
    request on the top device is queued again, remapped, there, so only the top one counts."""
    out = []
    for dev in devices:
        for below in stack_below(dev, sys_root):
            out.append((below, 0, 1 << 62))
            disk, start = disk_of(below, sys_root)
            if disk != below:
                out.append((disk, start, start + size_bytes(below, sys_root) // 512))
    return out


def launch_requests(requests: Sequence[BlockRequest], tree: TaskTree, devices: Sequence[int],
                    start_ns: int, end_ns: int, kthread=None, sys_root: str = "/sys") -> List[BlockRequest]:
    kthread = kthread or KernelThreads()
    devs: Set[int] = set(devices) - lower_devices(devices)
    below = stacked_below(devices, sys_root)
    out = []
    for r in requests:
        if not (start_ns <= r.issue_ns <= end_ns):
            continue
        if any(r.dev == d and lo <= r.sector < hi for d, lo, hi in below):
            continue   # the remapped copy of a request of the stacked device above
        if r.tid in tree.tids:
            r.pid = tree.tgid(r.tid)
            out.append(r)
        elif r.dev in devs and kthread(r.tid, r.comm):
            out.append(r)
    return out
