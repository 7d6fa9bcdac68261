""".wsched -> the app's active schedule on this machine.

For each file of the export: the local path (after --map-prefix) must be a regular file of the
same size whose scheduled bytes have the same SHA-256; a file that is missing or differs is
refused (its ranges are left out) and counted. Each accepted range is placed with the file's
FIEMAP now (split where the file is not contiguous), the metadata blocks of the accepted files
are re-derived from the local ext4 (analyzer/ext4meta.py) and put first in the segment that first reads
the file, and each segment is sorted like the analyzer's: metadata sweep, then data sweep, each
by (device, LBA) (analyzer/ordering.fetch_order). Segments are re-searched with this disk
timing them (O_DIRECT); where it cannot, the exporter's boundaries are kept and t_i and t_exp
are modelled for the local layout with the disk's stored profile (analyzer/access.schedule_cost;
without one, the model of its class).
"""

import os
import stat
import time
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Sequence, Tuple

from ..fiemap import place
from ..fs import FileSystems
from ..devices import disk_of
from ..analyzer.access import remodel
from ..analyzer.ordering import fetch_order
from ..analyzer.probe import device_path, run as probe_run
from ..analyzer.segment import Cost, optimise
from ..db.connection import transaction
from ..db.recordings import delete_app, get_app, upsert_app
from ..db.schedules import save_schedule
from ..model import Extent, Range, Schedule, ScheduledFile, Segment
from ..errors import WarmstartError
from ..analyzer.ext4meta import MetadataFinder
from .format import Portable, content_hash, decode


@dataclass
class ImportResult:
    app: str
    schedule_id: Optional[int]
    created_app: bool
    files: int                     # accepted
    refused_files: int
    refused: Dict[str, str] = field(default_factory=dict)     # local path -> why
    ranges: int = 0                # file ranges stored (after splitting at extents)
    bytes: int = 0
    refused_ranges: int = 0
    refused_bytes: int = 0
    metadata_ranges: int = 0       # re-derived here
    metadata_bytes: int = 0
    dropped_device_ranges: int = 0  # left behind by the exporter
    segments: int = 0
    t_exp_s: float = 0.0
    metadata_note: Optional[str] = None
    resegmented: Optional[str] = None   # how the segmentation was redone here, or why not
    cost_model: Optional[str] = None    # what t_i and t_exp were timed or modelled with

    def to_json(self) -> dict:
        return dict(self.__dict__)


def map_path(path: bytes, prefix_map: Sequence[Tuple[bytes, bytes]]) -> bytes:
    """path with the first matching OLD prefix (a whole path component) replaced by NEW."""
    for old, new in prefix_map:
        old = old.rstrip(b"/")
        if path == old or path.startswith(old + b"/"):
            return new.rstrip(b"/") + path[len(old):]
    return path


def _check_file(path: bytes, size: int, digest: bytes, spans, fss) -> Tuple[Optional[tuple], Optional[str]]:
    """((ScheduledFile, extents, stat, data device), None) if the local file matches, else (None,
    why). Extents address the data device of its file system (fs.FileSystem.extents: btrfs's
    logical addresses translated).

    The schedule names the file by its real path, as the analyzer's do: the replayer never
    follows a symlink in the last component (one there was put there since the analysis)."""
    path = os.path.realpath(path)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC | os.O_NOFOLLOW | getattr(os, "O_NOATIME", 0))
    except FileNotFoundError:
        return None, "missing"
    except OSError as e:
        return None, f"cannot open ({e.strerror})"
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            return None, "not a regular file"
        if st.st_size != size:
            return None, f"other size ({st.st_size} bytes here, {size} in the export)"
        try:
            if content_hash(fd, spans, size) != digest:
                return None, "other content (SHA-256 of the scheduled bytes differs)"
        except OSError as e:
            return None, f"cannot read ({e.strerror or e})"
        fs = fss.of_path(path)
        dev = fs.data_device() if fs is not None else None
        if dev is None:
            return None, ((fs.cannot_map() if fs else None) or "on no block device") + ": its blocks cannot be placed"
        try:
            exts = fs.extents(fd)
        except OSError as e:
            return None, f"no FIEMAP ({e.strerror}): its blocks cannot be placed"
        sf = ScheduledFile(path, st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)
        return (sf, exts, st, dev), None
    finally:
        os.close(fd)


def place_range(sf: ScheduledFile, exts: List[Extent], dev: int, offset: int, length: int) -> List[Range]:
    """The range [offset, offset+length) of sf as ranges on the whole disk, one per physical run
    (exts address block device dev)."""
    disk, start = disk_of(dev)
    return [Range(disk, run.sector, run.nr_sectors, run.length, sf, run.file_offset)
            for run in place(exts, offset, length, start)]


def import_schedule(conn, data: bytes, *, name: Optional[str] = None,
                    prefix_map: Sequence[Tuple[bytes, bytes]] = (), metadata: bool = True,
                    activate: bool = True, save: bool = True, source: str = "schedule file") -> ImportResult:
    """Re-map the export `data` to this machine and store it as the app's active schedule."""
    p: Portable = decode(data, source)
    app_name = name or p.app_name
    res = ImportResult(app_name, None, False, 0, 0,
                       dropped_device_ranges=sum(s.dropped_device_ranges for s in p.segments))
    local = _local_files(p, prefix_map, res)                                   # 1
    segments = _placed_segments(p, local, metadata, res)                       # 2
    segments, res.resegmented, t_model = _resegment(segments)                  # 3
    sched = _schedule(p, app_name, segments, local, prefix_map, res)
    if t_model is None:                                                        # 4
        res.cost_model = remodel(conn, sched)
    else:
        sched.t_exp_s, res.cost_model = t_model, "timed on this disk (O_DIRECT)"
    sched.params["imported"].update(resegmented=res.resegmented, cost_model=res.cost_model)
    res.segments, res.t_exp_s = len(segments), sched.t_exp_s
    if save:
        res.schedule_id, res.created_app = _store(conn, sched, p, prefix_map, activate)
    return res


def _local_files(p: Portable, prefix_map, res: ImportResult) -> Dict[int, tuple]:
    """Step 1: export file number -> (ScheduledFile, extents, stat, data device) of each local file that
    matches; the others are refused (in res). Raises if none matches."""
    spans: Dict[int, List[tuple]] = {}
    for s in p.segments:
        for r in s.ranges:
            spans.setdefault(r.file_no, []).append((r.offset, r.length))
    local: Dict[int, tuple] = {}
    fss = FileSystems()
    for i, f in enumerate(p.files):
        path = map_path(f.path, prefix_map)
        ok, why = _check_file(path, f.size, f.sha256, spans.get(i, []), fss)
        if ok:
            local[i] = ok
        else:
            res.refused[os.fsdecode(path)] = why
    res.files, res.refused_files = len(local), len(res.refused)
    if not local:
        raise WarmstartError(f"none of the {len(p.files)} files of the export matches this machine "
                             f"(first: {next(iter(res.refused.items()), ('', ''))}); "
                             f"use --map-prefix OLD=NEW if they live elsewhere here")
    return local


def _placed_segments(p: Portable, local: Dict[int, tuple], metadata: bool, res: ImportResult) -> List[Segment]:
    """Step 2: the exporter's segments with each accepted range placed on this disk and the files'
    metadata blocks re-derived here, in fetch order. A segment left empty gives its CPU time to
    its neighbour."""
    finder = MetadataFinder() if metadata else None
    if finder is not None:
        os.sync()   # the inodes' extent roots are read from the device
    segments: List[Segment] = []
    carry_cpu, carry_first = 0.0, None
    try:
        for s in p.segments:
            meta_runs, data = [], []
            for r in s.ranges:
                if r.file_no not in local:
                    res.refused_ranges += 1
                    res.refused_bytes += r.length
                    continue
                sf, exts, st, dev = local[r.file_no]
                if finder is not None:
                    meta_runs += finder.for_file(sf.path, st)
                data += place_range(sf, exts, dev, r.offset, r.length)
            meta = _coalesce(meta_runs)
            ranges = fetch_order(meta + data)
            if not ranges:   # nothing left here: its CPU time belongs to its neighbour
                if segments:
                    segments[-1].cpu_s += s.cpu_s
                    segments[-1].last_p = s.last_p
                else:
                    carry_cpu += s.cpu_s
                    carry_first = s.first_p if carry_first is None else carry_first
                continue
            segments.append(Segment(len(segments) + 1, carry_first or s.first_p, s.last_p, 0.0,
                                    s.cpu_s + carry_cpu, sum(r.length for r in ranges), ranges))
            carry_cpu, carry_first = 0.0, None
            res.metadata_ranges += len(meta)
            res.metadata_bytes += sum(r.length for r in meta)
            res.ranges += len(data)
            res.bytes += sum(r.length for r in data)
    finally:
        if finder is not None:
            finder.close()
            if finder.reasons:
                res.metadata_note = "no metadata derived for " + "; ".join(f"{d}: {w}" for d, w in finder.reasons.items())
    if not metadata:
        res.metadata_note = "metadata not derived (--no-metadata)"
    return segments


def _schedule(p: Portable, app_name: str, segments: List[Segment], local: Dict[int, tuple], prefix_map,
              res: ImportResult) -> Schedule:
    """The imported schedule (t_exp not yet set), with where it came from in params["imported"]."""
    files = [local[i][0] for i in sorted(local)]
    return Schedule(None, app_name, p.meta.get("algorithm", "imported"), "imported", 0.0,
                    sum(s.bytes for s in segments), 0, [], segments, files,
                    {k: list(local[i][1]) for k, i in enumerate(sorted(local))},
                    params={"imported": {"from": p.meta.get("source"), "app": p.app_name,
                                         "t_exp_s_source": p.meta.get("t_exp_s"),
                                         "prefix_map": [[os.fsdecode(a), os.fsdecode(b)] for a, b in prefix_map],
                                         "refused_files": res.refused_files, "refused": res.refused,
                                         "dropped_device_ranges": res.dropped_device_ranges,
                                         "metadata_ranges": res.metadata_ranges,
                                         "metadata_note": res.metadata_note,
                                         "imported_at": time.time()}})


class _LocalDiskCost(Cost):
    """DISK_ACCESS of exported segments a..b merged, timed on this machine's disk (O_DIRECT)."""

    def __init__(self, units: List[Segment]):
        super().__init__()
        self.units, self.failed = units, None

    def measure(self, a: int, b: int) -> float:
        if self.failed:
            return 0.0
        ranges = fetch_order([r for u in self.units[a:b + 1] for r in u.ranges])
        total = 0.0
        for dev in sorted({r.dev for r in ranges}):
            try:
                # a positioning read first (not counted), as the analyzer's disk probes do
                p = probe_run(device_path(dev), [(0, 4096)] + [(r.sector * 512, r.nr_sectors * 512)
                                                              for r in ranges if r.dev == dev])
            except WarmstartError as e:
                self.failed = str(e).split(":")[0]
                return 0.0
            total += p.elapsed_s - p.request_s[0]
        return total


def _resegment(units: List[Segment]) -> Tuple[List[Segment], str, Optional[float]]:
    """The exporter's segments fit the exporter's disk; here the files sit elsewhere, so the
    segmentation is searched again with this disk timing it (the analyzer's optimiser over the
    exported segments as units: neighbours can merge, none can split, P itself is not exported).
    Returns (segments, what was done, modelled launch time or None)."""
    if len(units) < 2:
        return units, "not needed (one segment)", None
    cost = _LocalDiskCost(units)
    found = optimise([u.cpu_s for u in units], cost, time_budget_s=2.0)
    if cost.failed:
        return units, f"kept the exporter's segments: {cost.failed}", None
    out = []
    for k, (a, b) in enumerate(found.segments, start=1):
        group = units[a:b + 1]
        ranges = fetch_order([r for u in group for r in u.ranges])
        out.append(Segment(k, group[0].first_p, group[-1].last_p, cost(a, b), sum(u.cpu_s for u in group),
                           sum(r.length for r in ranges), ranges))
    return out, f"{len(units)} exported segments -> {len(out)} timed on this disk", found.t_model


def _coalesce(runs) -> List[Range]:
    """Metadata blocks (dev, sector, n) as device ranges, touching blocks joined."""
    out: List[Range] = []
    for dev, sector, n in sorted(set(runs)):
        if out and out[-1].dev == dev and out[-1].sector + out[-1].nr_sectors == sector:
            prev = out[-1]
            out[-1] = Range(dev, prev.sector, prev.nr_sectors + n, prev.length + n * 512)
        else:
            out.append(Range(dev, sector, n, n * 512))
    return out


def _store(conn, sched: Schedule, p: Portable, prefix_map, activate: bool) -> Tuple[int, bool]:
    """Save the schedule, creating the app (with the exporter's command, paths mapped) if needed."""
    row = get_app(conn, sched.app_name)
    created = row is None
    if created:
        with transaction(conn):
            app_id = upsert_app(conn, sched.app_name, map_path(p.executable, prefix_map),
                                [map_path(a, prefix_map) for a in p.argv])
    else:
        app_id = row["id"]
    try:
        return save_schedule(conn, sched, app_id=app_id, activate=activate), created
    except BaseException:
        if created:
            delete_app(conn, sched.app_name)
        raise
