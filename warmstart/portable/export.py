"""Schedule -> .wsched: the app's active schedule with each range named by (file, offset, length).

Device ranges (metadata: inode tables, directories, extent blocks) have no file to name them by,
and their LBAs mean nothing on another machine, so they are not carried: each segment records
how many it dropped, and import re-derives the metadata of the files it imports (analyzer/ext4meta.py).
A scheduled file that changed since the analysis (other inode, size or mtime) is left out, since
its recorded ranges may no longer be the pages the app reads; the export says how many.
"""

import os
import socket
import time
from dataclasses import dataclass, field
from typing import Dict, List

from ..db.recordings import argv_of, get_app
from ..db.schedules import load_active_schedule
from ..model import Schedule
from ..errors import WarmstartError
from .format import Portable, PFile, PRange, PSegment, content_hash, encode


@dataclass
class ExportResult:
    data: bytes
    app: str
    schedule_id: int
    files: int
    ranges: int
    bytes: int
    dropped_device_ranges: int
    dropped_device_bytes: int
    skipped_files: Dict[str, str] = field(default_factory=dict)   # path -> why

    def to_json(self) -> dict:
        d = {k: v for k, v in self.__dict__.items() if k != "data"}
        d["size"] = len(self.data)
        return d


def _file_hashes(sched: Schedule) -> Dict[int, tuple]:
    """file index -> (size, sha256) of the scheduled files whose identity still matches, or the
    reason it does not (a str)."""
    spans: Dict[int, List[tuple]] = {}
    index = {f: i for i, f in enumerate(sched.files)}
    for seg in sched.segments:
        for r in seg.ranges:
            if r.file is not None:
                spans.setdefault(index[r.file], []).append((r.file_offset, r.length))
    out = {}
    for i, ranges in spans.items():
        f = sched.files[i]
        try:
            fd = os.open(f.path, os.O_RDONLY | os.O_CLOEXEC | getattr(os, "O_NOATIME", 0))
        except OSError as e:
            out[i] = f"cannot open: {e.strerror}"
            continue
        try:
            st = os.fstat(fd)
            if (st.st_ino, st.st_size, st.st_mtime_ns) != (f.ino, f.size, f.mtime_ns):
                out[i] = "changed since the analysis (run `warmstart analyze` again)"
                continue
            out[i] = (st.st_size, content_hash(fd, ranges, st.st_size))
        except OSError as e:
            out[i] = f"cannot read: {e.strerror or e}"
        finally:
            os.close(fd)
    return out


def export_schedule(conn, app_name: str) -> ExportResult:
    """The .wsched bytes of app_name's active schedule."""
    app = get_app(conn, app_name)
    sched = load_active_schedule(conn, app_name)   # raises for an unknown app
    if sched is None:
        raise WarmstartError(f"{app_name!r} has no schedule to export: run `warmstart analyze {app_name}` first")
    hashes = _file_hashes(sched)
    skipped = {os.fsdecode(sched.files[i].path): why for i, why in hashes.items() if isinstance(why, str)}
    index = {f: i for i, f in enumerate(sched.files)}
    files: List[PFile] = []
    new_no: Dict[int, int] = {}
    segments = []
    nranges = nbytes = dropped = dropped_bytes = 0
    for seg in sched.segments:
        ps = PSegment(seg.idx, seg.first_p, seg.last_p, seg.cpu_s, seg.t_disk_s)
        for r in seg.ranges:
            if r.file is None:
                ps.dropped_device_ranges += 1
                ps.dropped_device_bytes += r.length
                continue
            i = index[r.file]
            if isinstance(hashes[i], str):
                continue
            if i not in new_no:
                new_no[i] = len(files)
                files.append(PFile(r.file.path, *hashes[i]))
            ps.ranges.append(PRange(new_no[i], r.file_offset, r.length))
            nranges += 1
            nbytes += r.length
        dropped += ps.dropped_device_ranges
        dropped_bytes += ps.dropped_device_bytes
        segments.append(ps)
    if not files:
        raise WarmstartError(f"nothing to export for {app_name!r}: none of its scheduled files is unchanged "
                             f"({len(skipped)} skipped); run `warmstart analyze {app_name}` again")
    meta = {"algorithm": sched.algorithm, "probe": sched.probe, "t_exp_s": sched.t_exp_s,
            "source": {"host": socket.gethostname(), "schedule_id": sched.id,
                       "analyzed_at": sched.created_at, "exported_at": time.time()},
            "dropped_device_ranges": dropped, "dropped_device_bytes": dropped_bytes,
            "skipped_files": len(skipped)}
    data = encode(Portable(app_name, bytes(app["executable"]), argv_of(app), files, segments, meta))
    return ExportResult(data, app_name, sched.id, len(files), nranges, nbytes, dropped, dropped_bytes, skipped)
