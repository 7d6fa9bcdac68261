"""After a move the schedules' LBAs are wrong: give every affected app a schedule with the new ones.

Step 1 (always, here): remap. Each file range is looked up in the file's FIEMAP as it is now,
split where the file is no longer contiguous, and each segment re-sorted by LBA; segments,
metadata ranges and CPU times are kept, t_disk_s and t_exp_s are re-modelled. The result is saved
as the app's new active schedule (params.remapped_from = the old id), so `run` and `bench` fetch
in the new order at once.

Step 2: the analyzer (`warmstart.analyzer.analyze.analyze`) is run on the app's
recordings. It maps every recorded access through the FIEMAP the recorder took (where the launch
found the bytes) and places the pieces where they are now, so it re-segments on the new layout
(shorter t_i: fewer, longer segments); its schedule replaces the remapped one. If it cannot run (no recordings, no device profile and no
O_DIRECT probes, ...), the remapped schedule stays active and the report says why.
"""

import dataclasses
import os
from typing import Dict, List, Optional, Tuple

from ..db.recordings import recorded_extents_complete
from ..db.schedules import activate_schedule, load_active_schedule, save_schedule
from ..model import Extent, Range, Schedule, ScheduledFile
from . import model
from .extents import fiemap

class FileMap:
    """Current FIEMAP of files by path, read once per path."""

    def __init__(self):
        self._cache: Dict[bytes, Tuple[Optional[os.stat_result], list]] = {}

    def get(self, path: bytes):
        if path not in self._cache:
            try:
                fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
            except OSError:
                self._cache[path] = (None, [])
            else:
                try:
                    self._cache[path] = (os.fstat(fd), fiemap(fd))
                finally:
                    os.close(fd)
        return self._cache[path]

    def locate(self, r: Range) -> List[Tuple[int, int]]:
        """(sector, nr_sectors) runs on r.dev holding range r now; the old place if unknown."""
        if r.file is None or r.file_offset is None:
            return [(r.sector, r.nr_sectors)]
        st, extents = self.get(r.file.path)
        if st is None or st.st_ino != r.file.ino:
            return [(r.sector, r.nr_sectors)]
        base = 0 if st.st_dev == r.dev else model.partition_start(st.st_dev)
        runs, lo, hi = [], r.file_offset, r.file_offset + r.length
        for e in extents:
            a, b = max(lo, e.logical), min(hi, e.logical + e.length)
            if a >= b:
                continue
            phys = e.physical + (a - e.logical)
            start = base + phys // 512
            end = base + -(-(phys + b - a) // 512)
            if runs and runs[-1][0] + runs[-1][1] == start:
                runs[-1] = (runs[-1][0], end - runs[-1][0])
            else:
                runs.append((start, end - start))
        return runs or [(r.sector, r.nr_sectors)]


def remap_schedule(sched: Schedule, files: FileMap) -> Schedule:
    """A copy of sched with every file range at its current place, segments re-sorted by LBA."""
    stroke = 0
    new_files, by_old = [], {}
    for f in sched.files:
        st, _ = files.get(f.path)
        nf = f if st is None or st.st_ino != f.ino else ScheduledFile(
            f.path, f.dev, f.ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)
        new_files.append(nf)
        by_old[f] = nf
    segments = []
    for seg in sched.segments:
        ranges = []
        for r in seg.ranges:
            stroke = stroke or model.device_sectors(r.dev)
            runs = files.locate(r)
            if r.file is None or len(runs) == 1 and runs[0] == (r.sector, r.nr_sectors):
                ranges.append(dataclasses.replace(r, file=by_old.get(r.file)))
                continue
            offset = r.file_offset
            left = r.length
            for sector, n in runs:
                length = min(left, n * 512)
                # replace() keeps any other fields a Range has (e.g. its position in the launch).
                ranges.append(dataclasses.replace(r, sector=sector, nr_sectors=n, length=length,
                                                  file=by_old[r.file], file_offset=offset))
                offset += length
                left -= length
        ranges.sort(key=lambda x: (x.sector, x.nr_sectors))
        segments.append(dataclasses.replace(seg, ranges=ranges))
    extents = {}
    for i, f in enumerate(new_files):
        _, exts = files.get(f.path)
        extents[i] = [Extent(e.logical, e.physical, e.length, e.flags) for e in exts]
    new = dataclasses.replace(sched, id=None, files=new_files, segments=segments, extents=extents,
                              created_at=0.0, stale=False,
                              params=dict(sched.params, remapped_from=sched.id))
    cost = model.schedule_cost(new, lambda r: [(r.sector, r.nr_sectors)], stroke)
    for seg, c in zip(new.segments, cost.per_segment):
        seg.t_disk_s = c.seconds
    new.t_exp_s = cost.launch_s
    return new


def reanalyze(conn, app_names) -> List[dict]:
    """Remap (and, if the analyzer provides it, re-segment) the active schedule of each app."""
    files = FileMap()
    out = []
    for name in app_names:
        old = load_active_schedule(conn, name)
        if old is None:
            continue
        new = remap_schedule(old, files)
        sid = save_schedule(conn, new)
        entry = {"app": name, "old_schedule": old.id, "remapped_schedule": sid,
                 "analyzer": _run_analyzer(conn, name, old)}
        entry["analyzer"] += _keep_remap_if_unmapped(conn, name, new, sid)
        out.append(entry)
    return out


def _file_bytes(s: Schedule) -> int:
    return sum(r.length for seg in s.segments for r in seg.ranges if r.file is not None)


def _keep_remap_if_unmapped(conn, name: str, remapped: Schedule, remapped_id: int) -> str:
    """Recordings made before the recorder stored each file's extents are mapped through the files'
    FIEMAP now; data that moved is no longer at its recorded LBA, so it comes out as raw device
    ranges at the old (freed) places (measured: 0 of 21 MiB file bytes for python after a move).
    Keep the remapped schedule active when the analyzer's maps fewer file bytes (measured: losing
    the 3 MiB of another app's moved shared files made node's launch 1.9x slower)."""
    active = load_active_schedule(conn, name)
    if active is None or active.id == remapped_id or _recorded_extents(conn, name):
        return ""
    got, want = _file_bytes(active), _file_bytes(remapped)
    if got >= want:
        return ""
    activate_schedule(conn, name, remapped_id)
    return (f"; its schedule {active.id} maps only {got / 2**20:.1f} of {want / 2**20:.1f} MiB to files (the recorded "
            f"LBAs predate the move): the remapped schedule {remapped_id} stays active")


def _recorded_extents(conn, name: str) -> bool:
    """Do all of the app's recordings carry their files' extents (so the re-run maps moved data)?
    Their file bytes may then legitimately differ from the remap's (other gaps merged)."""
    return recorded_extents_complete(conn, name)


def _run_analyzer(conn, name: str, old: Schedule) -> str:
    """Re-run the analyzer with the options the old schedule was made with; say what happened."""
    from ..analyzer.analyze import ALGORITHMS, PROBES, Options, analyze
    from ..errors import WarmstartError
    opts = Options(probe=old.probe if old.probe in PROBES else "auto",
                   algorithm=old.algorithm if old.algorithm in ALGORITHMS else "optimal")
    try:
        result = analyze(conn, name, opts)
    except WarmstartError as e:
        return f"not re-run ({e}); the remapped schedule is active"
    segs = result.get("segments") if isinstance(result, dict) else None
    return "re-segmented" + (f" ({len(segs)} segments)" if isinstance(segs, list) else "")
