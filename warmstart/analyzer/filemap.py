"""Map the launch's block ranges to (file, offset, length), so replay fills the right page cache.

A recorded LBA range is mapped through the FIEMAP the recorder took of the launch's files (where
the reads found their bytes), and each piece is then placed where the file's bytes are *now*: the
two differ when data moved after the recording (warmstart relocate, e4defrag). Recordings
without extents (older ones) are mapped through today's FIEMAP. A file
is used only if it still has the identity it had at record time (same dev, inode, size, mtime);
a deleted or changed file is skipped and counted. When the recording has page-cache events for a
file, a mapped piece must also cover pages the launch really added to that file's cache, so a
block that has since been reused by another file of the launch is not fetched under its name.

What maps to no file stays a block-device range when the kernel flagged the read as metadata
(REQ_META: inode tables, directories, extent blocks); an unflagged unmapped read is kept as a device
range only if no file of the recording was skipped; otherwise it may have been a deleted file's
data and it is dropped (counted in `dropped_unmapped_bytes`). Either kind is kept only where a raw
read of the device can help (warmstart/fs/metadata.py: inside an ext2/3/4 file system); on XFS,
btrfs or a device no mount names it is dropped (`dropped_raw_bytes`, the reasons in `raw_dropped`):
their metadata is warmed through the file system by the replayer's metadata step instead, and
the dropped reads of an XFS or btrfs device are kept aside (`fs_meta_reads`) to model that step.

A file whose data the file system keeps in its metadata (FIEMAP's DATA_INLINE: btrfs stores files
up to 2 KiB in its tree) has no extent, so no recorded read maps to it; the launch's page-cache
events still show it read it (git reads every loose object so). `inline_ranges` gives each such
file one range where its file system places that data (FileSystem.inline_data_places): the
metadata step's seek of the file reads the leaf, and the pre-buffer's read of the range then
costs no disk read.

Devices: requests are on the device the tracer saw; a file's extents are relative to its file
system's data device (fs.FileSystem.data_device: the mounted device, btrfs's device from its
device list, extents translated from btrfs logical addresses). For a partition both coordinates
are indexed: (partition, sector) and (whole disk, partition start + sector). A file is the
recorded one when its (dev, ino) as the page cache names it (fs.FileSystem.cache_key) is the
recorded one.
"""

import bisect
import os
import stat
from dataclasses import dataclass, field
from typing import Dict, Iterable, List, Optional, Sequence, Set, Tuple

from ..devices import disk_of
from ..fiemap import FIEMAP_EXTENT_DATA_INLINE, fiemap_fd, mappable, place
from ..fs import FileSystems
from ..fs.metadata import RawReadPolicy, directories_on
from ..model import Extent, FileInfo, Range, ScheduledFile
from .sequence import Access


@dataclass(frozen=True)
class Piece:
    """A part of p_i: sectors on dev, and where they belong (file None: block device)."""
    dev: int
    sector: int
    nr_sectors: int
    is_meta: bool
    file: Optional[ScheduledFile] = None
    file_offset: int = 0
    length: int = 0          # bytes to read (a file's last piece stops at its end)
    first_p: int = 0         # 1-based index in P of the first access that reads it (0: unknown)

    @property
    def end(self) -> int:
        return self.sector + self.nr_sectors


@dataclass
class FileMapReport:
    files_used: int = 0
    skipped: Dict[str, str] = field(default_factory=dict)    # path -> why (deleted, changed, ...)
    mapped_bytes: int = 0
    moved_files: int = 0      # files whose bytes moved since the recording (mapped through its extents)
    unused_bytes: int = 0     # file bytes the launch read (readahead) but never used: not fetched
    metadata_bytes: int = 0
    inline_files: int = 0       # files read whose data is inline in the file system's metadata
    inline_placed: int = 0      # those given a range (inline_ranges)
    device_bytes: int = 0                                     # unflagged, kept as device ranges
    dropped_unmapped_bytes: int = 0
    dropped_mismatch_bytes: int = 0                           # mapped to pages the launch never added
    dropped_raw_bytes: int = 0                                # unmapped, on a device raw reads cannot warm
    raw_dropped: Dict[str, str] = field(default_factory=dict)  # "maj:min" -> why its raw ranges were dropped

    def to_json(self) -> dict:
        d = dict(self.__dict__)
        d["skipped"] = {k: v for k, v in self.skipped.items()}
        d["raw_dropped"] = dict(self.raw_dropped)
        d["skipped_files"] = len(self.skipped)
        return d


def _identity_problem(rf: FileInfo, st: os.stat_result, key: Tuple[int, int]) -> Optional[str]:
    """Why the file at rf.path is no longer the one recorded; key: its (dev, ino) as the page
    cache names it now (fs.FileSystem.cache_key: btrfs's file system dev, not the subvolume's)."""
    if key != (rf.dev, rf.ino):
        return "replaced (another inode at this path now)"
    if rf.size is not None and st.st_size != rf.size:
        return f"changed (size {rf.size} -> {st.st_size})"
    if rf.mtime_ns is not None and st.st_mtime_ns != rf.mtime_ns:
        return "changed (mtime differs)"
    return None


def _extents(fs, path: bytes) -> List[Extent]:
    """The file's mapped extents now, on its file system's data device. Raises OSError."""
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        return fs.extents(fd)
    finally:
        os.close(fd)


def _inline(path: bytes) -> bool:
    """Whether the file's data is inline in its file system's metadata (FIEMAP)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return False
    try:
        return any(e.flags & FIEMAP_EXTENT_DATA_INLINE for e in fiemap_fd(fd, sync=False))
    except OSError:
        return False
    finally:
        os.close(fd)


class FileMap:
    """An index from (dev, sector) to the files of a launch, built from their FIEMAP now."""

    def __init__(self, files: Iterable[FileInfo], added_pages: Optional[Dict[Tuple[int, int], Set[int]]] = None,
                 used_pages: Optional[Dict[Tuple[int, int], List[Tuple[int, int]]]] = None,
                 raw_policy: Optional[RawReadPolicy] = None):
        self.report = FileMapReport()
        self.fss = raw_policy.fss if raw_policy is not None else FileSystems()
        self.raw_policy = raw_policy    # where unmapped raw ranges help; None: everywhere (no mounts asked)
        self.added_pages = added_pages  # (dev, ino) -> page indexes the launch added; None: unknown
        self.used_pages = used_pages    # (dev, ino) -> sorted (first, last) page runs used; None: keep all
        # the launch's reads of XFS/btrfs metadata: (block dev, sector, sectors), in launch order;
        # the replayer's metadata step reads them through the file system (analyzer.access.metadata_step)
        self.fs_meta_reads: List[Tuple[int, int, int]] = []
        self.files: List[ScheduledFile] = []
        self.extents: Dict[ScheduledFile, List[Extent]] = {}
        # read by the launch, data inline (no extent): (file, its file system, its stat)
        self.inline: List[Tuple[ScheduledFile, object, os.stat_result]] = []
        self.recorded_key: Dict[ScheduledFile, Tuple[int, int]] = {}   # of those: (dev, ino) as recorded
        # per device: sorted starts, and (start, end, file, logical_bytes, ino_key)
        self._idx: Dict[int, List[Tuple[int, int, ScheduledFile, int, Tuple[int, int]]]] = {}
        for rf in files:
            self._add(rf)
        self._starts = {dev: [e[0] for e in lst] for dev, lst in self._idx.items()}

    def _add(self, rf: FileInfo) -> None:
        name = (rf.path or b"<unresolved>").decode("utf-8", "surrogateescape")
        if rf.path is None:
            self.report.skipped[f"{name} dev={rf.dev} ino={rf.ino}"] = "path not resolved at record time"
            return
        try:
            st = os.stat(rf.path)
        except FileNotFoundError:
            self.report.skipped[name] = "deleted since recording"
            return
        except OSError as e:
            self.report.skipped[name] = f"cannot stat: {e.strerror}"
            return
        fs = self.fss.of_path(os.path.realpath(rf.path))
        problem = _identity_problem(rf, st, fs.cache_key(rf.path, st) if fs else (st.st_dev, st.st_ino))
        dev = fs.data_device() if fs is not None else None
        if problem is None and dev is None:
            problem = (fs.cannot_map() if fs else None) or "on no block device"
        if problem:
            self.report.skipped[name] = problem
            return
        try:
            exts = _extents(fs, rf.path)
        except OSError as e:
            self.report.skipped[name] = f"no FIEMAP: {e.strerror}"
            return
        sf = ScheduledFile(rf.path, st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)
        self.files.append(sf)
        self.extents[sf] = exts
        self.report.files_used += 1
        if not exts and st.st_size and (self.added_pages is None or (rf.dev, rf.ino) in self.added_pages) \
                and _inline(rf.path):
            self.inline.append((sf, fs, st))
            self.recorded_key[sf] = (rf.dev, rf.ino)
            self.report.inline_files += 1
        recorded = [e for e in rf.extents if mappable(e)] if rf.extents is not None else exts
        moved = [(e.logical, e.physical, e.length) for e in recorded] != \
            [(e.logical, e.physical, e.length) for e in exts]
        self.report.moved_files += moved
        disk, start = disk_of(dev)
        targets = {(dev, 0), (disk, start)}
        for e in recorded:
            for tdev, off in targets:
                s = off + e.physical // 512
                self._idx.setdefault(tdev, []).append((s, s + (e.length + 511) // 512, sf, e.logical,
                                                       (rf.dev, rf.ino), (off, exts) if moved else None))
        for lst in self._idx.values():
            lst.sort(key=lambda t: t[0])

    def _page_ok(self, key: Tuple[int, int], offset: int, length: int) -> bool:
        if self.added_pages is None or key not in self.added_pages:
            return True  # no page-cache events for this file: trust the identity check
        pages = self.added_pages[key]
        return any(p in pages for p in range(offset // 4096, (offset + length - 1) // 4096 + 1))

    def _used(self, key: Tuple[int, int], offset: int, length: int) -> List[Tuple[int, int]]:
        """The parts (offset, length) of file bytes [offset, +length) on pages the launch used."""
        if self.used_pages is None:
            return [(offset, length)]
        runs = self.used_pages.get(key, [])
        end = offset + length
        out = []
        i = max(0, bisect.bisect_right(runs, (offset // 4096, 1 << 62)) - 1)
        for first, last in runs[i:]:
            if first * 4096 >= end:
                break
            lo, hi = max(offset, first * 4096), min(end, (last + 1) * 4096)
            if lo < hi:
                out.append((lo, hi - lo))
        self.report.unused_bytes += length - sum(n for _, n in out)
        return out

    def inline_ranges(self) -> List[Range]:
        """One range per file read whose data is inline in its file system's metadata, at the
        place its file system reads that data from (FileSystem.inline_data_places), on the whole
        disk like the mapped pieces; in (dev, sector) order. Files with no known place are left
        out."""
        by_fs: Dict[object, List[Tuple[ScheduledFile, os.stat_result]]] = {}
        for sf, fs, st in self.inline:
            by_fs.setdefault(fs, []).append((sf, st))
        out: List[Range] = []
        for fs, files in by_fs.items():
            places = fs.inline_data_places([(sf.path, st) for sf, st in files])
            disk, start = disk_of(fs.data_device())
            for sf, _ in files:
                at = places.get((sf.dev, sf.ino))
                if at is not None:
                    out.append(Range(disk, start + at // 512, -(-sf.size // 512), sf.size, sf, 0))
        self.report.inline_placed = len(out)
        return sorted(out, key=lambda r: (r.dev, r.sector))

    def inode_lookups(self, files: Iterable[ScheduledFile], named: Sequence[bytes] = ()) -> List[ScheduledFile]:
        """Files whose lookup makes the replayer's metadata step read the inode blocks the launch
        read: the inodes of files it only stat'ed (an interpreter checks each source beside the
        cached bytecode it reads) and of symlinks it followed. Where the file system places inodes
        by number (FileSystem.inode_clusters: XFS's inode clusters, btrfs's subvolume-tree
        leaves), one name per cluster read: first from `named` (the names the launch looked up,
        where the recording has them: lookups.looked_up_names), then from the entries of the
        directories on those paths (d_ino: no stat but the chosen one's), regular files and
        symlinks, never one of
        `files` or a directory, and for a cluster theirs too: warmstartd's watch on a scheduled
        file (a process's cwd, on a directory) keeps its inode in memory, and its lookup then reads
        nothing of its cluster (docs/replayer.md, "The metadata step") -- except where the step's
        seeks of the file's ranges read it anyway (btrfs: its extent items share the leaf). Then
        every other name in `named` on those file systems (no directory, none of `files`), read
        by the launch or not."""
        files = list(files)
        fs_of: Dict[int, Tuple[object, int]] = {}          # data device -> (fs, st_dev of its mount point)
        for f in files:
            fs = self.fss.of_path(f.path)     # by path: a btrfs file's st_dev is its subvolume's
            if fs is not None and fs.data_device() is not None and fs.data_device() not in fs_of:
                try:
                    fs_of[fs.data_device()] = (fs, os.lstat(fs.mount.target).st_dev)
                except OSError:
                    continue
        spans: Dict[int, List[Tuple[int, int]]] = {}       # st_dev -> inode clusters read
        for d, s, n in sorted(self.fs_meta_reads, key=lambda r: (r[0], r[1])):   # read back in disk order
            if d in fs_of:
                fs, st_dev = fs_of[d]
                spans.setdefault(st_dev, []).extend(fs.inode_clusters(s, n))
        spans = {dev: sorted(set(v)) for dev, v in spans.items() if v}
        starts = {dev: [a for a, _ in v] for dev, v in spans.items()}

        def span_of(dev: int, ino: int) -> Optional[Tuple[int, int]]:
            i = bisect.bisect_right(starts.get(dev, []), ino) - 1
            return (dev, i) if i >= 0 and ino < spans[dev][i][1] else None

        scheduled = {(f.dev, f.ino) for f in files}
        # where the step's seeks of a scheduled file read its inode's cluster even with the inode
        # in memory (FileSystem.seeks_read_inode_cluster: btrfs), that cluster needs no name
        seeking = {st_dev for fs, st_dev in fs_of.values() if fs.seeks_read_inode_cluster}
        served = {k for f in files if f.dev in seeking for k in [span_of(f.dev, f.ino)] if k is not None}
        found: List[ScheduledFile] = []
        have = set(scheduled)

        def add(path: bytes, st: os.stat_result) -> None:
            have.add((st.st_dev, st.st_ino))
            found.append(ScheduledFile(path, st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns))

        def take(path: bytes, dev: int, ino: int) -> bool:
            k = span_of(dev, ino)
            if k is None or k in served or (dev, ino) in scheduled:
                return False
            try:
                est = os.lstat(path)
            except OSError:
                return False
            if est.st_dev == dev and est.st_ino == ino and not stat.S_ISDIR(est.st_mode):
                served.add(k)
                add(path, est)
                return True
            return False

        # every name the launch looked up there: one per cluster read first, then the others too,
        # whether the recording saw their cluster read or not: one it did not see was cached at
        # the recording, not in general (an inode the launch before changed, its atime, stays in
        # XFS's log, and drop_caches leaves its cluster; the next launch reads it after the
        # release: docs/replayer.md)
        devs = {st_dev for _, st_dev in fs_of.values()}
        for path in named:
            try:
                st = os.lstat(path)
            except OSError:
                continue
            if not take(path, st.st_dev, st.st_ino) and st.st_dev in devs and \
                    (st.st_dev, st.st_ino) not in have and not stat.S_ISDIR(st.st_mode):
                add(path, st)
        for d, st in directories_on(f.path for f in files):
            if st.st_dev not in spans:
                continue
            try:
                entries = sorted((e.inode(), e.path) for e in os.scandir(d)
                                 if e.is_file(follow_symlinks=False) or e.is_symlink())
            except OSError:
                continue
            for ino, path in entries:
                take(path, st.st_dev, ino)
        return found

    def map_access(self, a: Access) -> List[Piece]:
        """The pieces of p_i, in disk order, with file pieces where the blocks belong to a file."""
        out: List[Piece] = []
        lst = self._idx.get(a.dev, [])
        starts = self._starts.get(a.dev, [])
        cur, end = a.sector, a.end
        i = max(0, bisect.bisect_right(starts, cur) - 1)
        while cur < end:
            # next extent overlapping [cur, end)
            while i < len(lst) and lst[i][1] <= cur:
                i += 1
            if i >= len(lst) or lst[i][0] >= end:
                out.append(self._unmapped(a, cur, end))
                break
            s, e, sf, logical, key, now = lst[i]
            if s > cur:
                out.append(self._unmapped(a, cur, s))
                cur = s
            pe = min(e, end)
            offset = logical + (cur - s) * 512
            length = max(0, min((pe - cur) * 512, sf.size - offset))
            if length and self._page_ok(key, offset, length):
                for o, n in self._used(key, offset, length):
                    if now is None:
                        out.append(Piece(a.dev, cur + (o - offset) // 512, -(-n // 512), a.is_meta, sf, o, n))
                    else:   # moved since the recording: where the bytes are now
                        base, exts = now
                        out.extend(Piece(a.dev, run.sector, run.nr_sectors, a.is_meta, sf, run.file_offset, run.length)
                                   for run in place(exts, o, n, base))
                    self.report.mapped_bytes += n
            elif length:
                self.report.dropped_mismatch_bytes += length
            cur = pe
            i += 1
        return [p for p in out if p is not None]

    def _unmapped(self, a: Access, s: int, e: int) -> Optional[Piece]:
        n = (e - s) * 512
        if self.raw_policy is not None and not self.raw_policy.helps(a.dev, s):
            self.report.dropped_raw_bytes += n
            if self.raw_policy.warmed_through_fs(a.dev, s):
                self.fs_meta_reads.append((a.dev, s, e - s))
            self.report.raw_dropped[f"{os.major(a.dev)}:{os.minor(a.dev)}"] = self.raw_policy.why_not(a.dev)
            return None
        if a.is_meta:
            self.report.metadata_bytes += n
            return Piece(a.dev, s, e - s, True, None, 0, n)
        if self.report.skipped:
            self.report.dropped_unmapped_bytes += n
            return None
        self.report.device_bytes += n
        return Piece(a.dev, s, e - s, False, None, 0, n)

