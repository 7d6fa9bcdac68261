"""The schedule export (.wsr) read by build/warmstart-replay; its layout is defined once in
warmstart/formats/wsr.py (the C reader includes the header generated from it).

Why an export instead of letting the C replayer query SQLite: it needs no SQL at start-up (no
libsqlite3, no WAL lock against a writer), is one read() plus two CRC checks, and carries
its own magic, version and checksums across the process boundary (STYLE habit 4).
"""

import os
from dataclasses import dataclass
from typing import Dict, List

from .. import devices
from ..errors import WarmstartError
from ..formats import wsr
from ..formats.wsr import FILE_AFTER_DIR, FILE_LIST_DIR, FILE_WARM_META, KIND_BLOCKDEV, KIND_DIR, KIND_FILE, WsrFile, WsrSegment
from ..fs import metadata
from ..paths import replace_file


@dataclass
class ExportInfo:
    path: bytes
    schedule_id: int
    files: int
    segments: int
    ranges: int
    device_ranges: int
    bytes: int
    prebuffer_bytes: int


def block_device_node(dev: int) -> bytes:
    """/dev path of block device `dev` (the schedule's metadata ranges are read through it)."""
    node = devices.device_node(dev)
    if node is None:
        raise WarmstartError(f"block device {os.major(dev)}:{os.minor(dev)} of the schedule's metadata "
                             f"ranges is not present; re-record the app on the current disk")
    return os.fsencode(node)


def contents(schedule, fs_metadata: bool = True) -> wsr.WsrContents:
    """What the replayer is to see of a warmstart.db.schedules.Schedule. fs_metadata: mark the
    files whose metadata the replayer is to warm through their file system (False: none)."""
    files: List[WsrFile] = []
    file_index = {}

    def add_file(key, path: bytes, dev, ino, size, mtime_ns, kind, flags=0, meta_pos=0, step_segment=0):
        if key not in file_index:
            file_index[key] = len(files)
            files.append(WsrFile(path, dev, ino, size, mtime_ns, kind, flags, meta_pos, step_segment))
        return file_index[key]

    # files on a file system whose metadata raw device reads cannot warm: the replayer's
    # metadata step warms it through the file system (as the analyzer decided; a schedule from
    # before that, or imported, asks this machine's mounts now)
    through_fs = set()
    positions = schedule.params.get("metadata_positions") or {}    # where the step's lookups read
    if fs_metadata:
        devs = schedule.params.get("fs_metadata_devs")
        through_fs = set(devs if devs is not None else metadata.warm_through_fs({f.dev for f in schedule.files}))
    # the metadata step warms each file just before the first segment that reads it (a file
    # looked up only: before the pre-buffer), as the launch needed it and as the analysis modelled
    # it; a schedule whose step was modelled all before segment 1 (analyzed before 2026-11-29, or
    # with --step-first) has it all there (docs/replayer.md)
    first_seg = {}
    for k, seg in enumerate(schedule.segments if schedule.step_by_segment else ()):
        for r in seg.ranges:
            if r.file is not None:
                first_seg.setdefault((r.file.path, r.file.dev, r.file.ino), k)
    swept = set(metadata.swept_devs(through_fs))
    for f in schedule.files:
        warm = f.dev in through_fs
        add_file(("f", f.path, f.dev, f.ino), f.path, f.dev, f.ino, f.size, f.mtime_ns, KIND_FILE,
                 (FILE_WARM_META | (FILE_AFTER_DIR if f.dev in swept else 0)) if warm else 0,
                 positions.get(metadata.position_key(f.dev, f.ino), 0) if warm else 0,
                 first_seg.get((f.path, f.dev, f.ino), 0) if warm else 0)
    segs: List[WsrSegment] = []
    ranges: List[tuple] = []      # wsr.WsrRange's fields
    for k, seg in enumerate(schedule.segments):
        first = len(ranges)
        nbytes = 0
        for ord_, r in enumerate(seg.ranges):
            if r.file is None:     # metadata: read through the block device node
                no = add_file(("d", r.dev), block_device_node(r.dev), r.dev, 0, 0, 0, KIND_BLOCKDEV)
                offset = r.sector * 512
            else:
                no = file_index[("f", r.file.path, r.file.dev, r.file.ino)]
                offset = r.file_offset
            # interleave replays in first-access order; without orig_pos (an imported portable
            # schedule), segment order is the best approximation left (segments are contiguous in P).
            orig = r.orig_pos
            if orig is None:
                orig = seg.first_p * 65536 + ord_
            # WsrRange's fields as a plain tuple: cheaper, and `warmstart run` builds one per range per launch
            ranges.append((offset, r.length, r.sector, no, min(int(orig), 0xFFFFFFFF), k))
            nbytes += r.length
        segs.append(WsrSegment(seg.idx, first, len(ranges) - first, nbytes, int(round(seg.cpu_s * 1e9))))
    marked = {f.path: f.step_segment for f in files if f.flags & FILE_WARM_META}
    if marked:   # and the directories the launch looked names up in (analyzer/lookups.py): when is not known
        marked.update((os.fsencode(d) + b"/", 0) for d in schedule.params.get("lookup_dirs") or ())
    files.extend(_directories(marked, positions))
    return wsr.WsrContents(schedule.id or 0, files, segs, ranges)


def _directories(paths: Dict[bytes, int], positions: dict) -> List[WsrFile]:
    """The directories on these paths (fs.metadata.directories_on; a path ending in "/" names
    itself too) for the replayer's metadata step: their (dev, inode), or the place of their
    inode where the analysis found one (positions), put them among the files in its order;
    WSR_FILE_LIST_DIR marks those to read whole (FileSystem.list_dirs), WSR_FILE_AFTER_DIR those
    warmed after their own directory (FileSystem.step_sweeps); each is warmed with the first path
    under it (`paths`: path -> its step segment).
    One that is gone is left out (the step then reaches it through the lookups of the paths
    under it)."""
    found = [(d, st.st_dev, st.st_ino) for d, st in metadata.directories_on(paths)]
    devs = {dev for _, dev, _ in found}
    listed, swept = set(metadata.listed_dirs(devs)), set(metadata.swept_devs(devs))
    step = {}
    for p, k in paths.items():
        for d in metadata.parents_of(p):
            step[d] = min(step.get(d, k), k)
    return [WsrFile(d, dev, ino, 0, 0, KIND_DIR,
                    (FILE_LIST_DIR if dev in listed else 0) | (FILE_AFTER_DIR if dev in swept else 0),
                    positions.get(metadata.position_key(dev, ino), 0), step.get(d, 0))
            for d, dev, ino in found]


def encode(schedule, fs_metadata: bool = True) -> bytes:
    """The .wsr bytes for a warmstart.db.schedules.Schedule."""
    return wsr.encode(contents(schedule, fs_metadata))


def export_in_memory(schedule, fs_metadata: bool = True) -> int:
    """The export for `schedule` in an anonymous in-memory file (memfd), as an open fd whose
    /dev/fd path the replayer can open: nothing on disk to write, clean up or leave behind when
    killed (what `warmstart run` hands its replayer)."""
    fd = os.memfd_create("warmstart-schedule.wsr", os.MFD_CLOEXEC)
    try:
        data = encode(schedule, fs_metadata)
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
    except BaseException:
        os.close(fd)
        raise
    return fd


def write_export(schedule, path, mode: int = 0o644) -> ExportInfo:
    """Write the export for `schedule` to `path` atomically (temp file + rename). The temp file
    is named after this process (PATH.tmp.PID): a concurrent writer never replaces it, and one a
    killed writer left behind is recognisable (hook refresh removes those). The file has exactly
    `mode` whatever the umask: 0644 by default, as the shim reads exports in every user's process."""
    c = contents(schedule)
    path = os.fsencode(path)
    replace_file(path, wsr.encode(c), mode)
    nranges = sum(len(s.ranges) for s in schedule.segments)
    return ExportInfo(path=path, schedule_id=schedule.id or 0, files=sum(f.kind != KIND_DIR for f in c.files),
                      segments=len(schedule.segments), ranges=nranges,
                      device_ranges=sum(r.file is None for s in schedule.segments for r in s.ranges),
                      bytes=sum(r.length for s in schedule.segments for r in s.ranges),
                      prebuffer_bytes=sum(r.length for r in schedule.segments[0].ranges) if schedule.segments else 0)
