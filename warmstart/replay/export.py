"""The schedule export (.wsr) read by build/warmstart-replay; layout in replayer/wsr_format.h.

Why an export instead of letting the C replayer query SQLite: it needs no SQL at start-up (no
libsqlite3, no WAL lock against a writer), is one read() plus two CRC checks, and carries
its own magic, version and checksums across the process boundary (STYLE habit 4).
"""

import os
import struct
import zlib
from dataclasses import dataclass
from typing import List, Optional

from .. import devices
from ..errors import WarmstartError
from ..paths import replace_file

MAGIC = b"WSREPLAY"
VERSION = 1
HEADER = struct.Struct("<8sIIQIIIIQIIII")      # 64 bytes; see wsr_format.h
FILE = struct.Struct("<QQQqIII4x")              # 48
SEGMENT = struct.Struct("<III4xQQ")             # 32
RANGE = struct.Struct("<QQQIII4x")              # 40
KIND_FILE, KIND_BLOCKDEV = 0, 1
assert (HEADER.size, FILE.size, SEGMENT.size, RANGE.size) == (64, 48, 32, 40)


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


def encode(schedule) -> bytes:
    """The .wsr bytes for a warmstart.db.schedules.Schedule."""
    files: List[tuple] = []
    strtab = bytearray()
    file_index = {}

    def add_file(key, path: bytes, dev, ino, size, mtime_ns, kind):
        if key not in file_index:
            file_index[key] = len(files)
            files.append((dev, ino, size, mtime_ns, len(strtab), len(path), kind))
            strtab.extend(path)
        return file_index[key]

    for f in schedule.files:
        add_file(("f", f.path, f.dev, f.ino), f.path, f.dev, f.ino, f.size, f.mtime_ns, KIND_FILE)
    segs, ranges = [], []
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
            ranges.append(RANGE.pack(offset, r.length, r.sector, no, min(int(orig), 0xFFFFFFFF), k))
            nbytes += r.length
        segs.append(SEGMENT.pack(seg.idx, first, len(ranges) - first, nbytes, int(round(seg.cpu_s * 1e9))))
    payload = b"".join(FILE.pack(*f) for f in files) + b"".join(segs) + b"".join(ranges) + bytes(strtab)
    fields = [MAGIC, VERSION, HEADER.size, schedule.id or 0, len(files), len(segs), len(ranges),
              len(strtab), len(payload), zlib.crc32(payload), 0, 0, 0]
    head = HEADER.pack(*fields)
    fields[11] = zlib.crc32(head)
    return HEADER.pack(*fields) + payload


def write_export(schedule, path) -> ExportInfo:
    """Write the export for `schedule` to `path` atomically (temp file + rename). The temp file
    is named after this process (PATH.tmp.PID): a concurrent writer never replaces it, and one a
    killed writer left behind is recognisable (hook refresh removes those)."""
    data = encode(schedule)
    path = os.fsencode(path)
    replace_file(path, data, 0o644)   # the shim reads exports in every user's process
    nranges = sum(len(s.ranges) for s in schedule.segments)
    return ExportInfo(path=path, schedule_id=schedule.id or 0, files=HEADER.unpack_from(data)[4],
                      segments=len(schedule.segments), ranges=nranges,
                      device_ranges=sum(r.file is None for s in schedule.segments for r in s.ranges),
                      bytes=sum(r.length for s in schedule.segments for r in s.ranges),
                      prebuffer_bytes=sum(r.length for r in schedule.segments[0].ranges) if schedule.segments else 0)


def verify(data: bytes) -> Optional[str]:
    """Why `data` is not a valid export, or None: the same checks the C side makes first."""
    if len(data) < HEADER.size:
        return "shorter than the header"
    h = list(HEADER.unpack_from(data))
    if h[0] != MAGIC or h[1] != VERSION or h[2] != HEADER.size:
        return "bad magic, version or header size"
    crc, h[11] = h[11], 0
    if zlib.crc32(HEADER.pack(*h)) != crc:
        return "header checksum mismatch"
    if len(data) != HEADER.size + h[8] or zlib.crc32(data[HEADER.size:]) != h[9]:
        return "size or payload checksum mismatch"
    return None
