"""The .wsr schedule export: written by warmstart/replay/export.py, read by build/warmstart-replay
(replayer/wsr_format.c includes the generated build/gen/wsr_layout.h).

    header (64 bytes) | files[nfiles] (64 each) | segments[nsegments] (32 each)
    | ranges[nranges] (40 each) | strtab (path bytes, not NUL-terminated)

header_crc32 covers the header with that field zeroed; payload_crc32 covers everything after it.
Every multi-byte field is little-endian. encode() is the byte-level writer: it takes the decoded
contents (what the C reader hands the replayer), so the shared test vectors describe exactly that.
"""

import zlib
from itertools import starmap
from typing import List, NamedTuple

from . import Field, Format, Record

MAGIC = b"WSREPLAY"
VERSION = 4                    # 2: FILE.flags (was padding); 3: FILE.meta_pos; 4: FILE.step_segment
KIND_FILE, KIND_BLOCKDEV, KIND_DIR = 0, 1, 2
FILE_WARM_META = 1             # FILE.flags of a regular file: warm its metadata through the file system
FILE_LIST_DIR = 2              # FILE.flags of a directory: the metadata step reads it whole
FILE_AFTER_DIR = 4             # FILE.flags of a file or directory: the step warms it after its directory
FILE_FLAGS = FILE_WARM_META | FILE_LIST_DIR | FILE_AFTER_DIR    # every flag a reader knows; others are refused
MAX_FILES = 1 << 20            # reader limits: a file claiming more is refused
MAX_RANGES = 1 << 22
MAX_PATH = 4095                # bytes; a longer path is refused

HEADER = Record("HEADER", 64,
                Field("magic", "8s", "WSR_MAGIC"),
                Field("version", "I", "WSR_VERSION"),
                Field("header_size", "I", "WSR_HEADER_SIZE"),
                Field("schedule_id", "Q"),
                Field("nfiles", "I"),
                Field("nsegments", "I"),
                Field("nranges", "I"),
                Field("strtab_len", "I"),
                Field("payload_len", "Q", "bytes after the header"),
                Field("payload_crc32", "I", "zlib CRC-32 of the payload"),
                Field("reserved", "I"),
                Field("header_crc32", "I", "zlib CRC-32 of the header with this field 0"),
                Field("reserved2", "I"))
FILE = Record("FILE", 64,
              Field("dev", "Q", "st_dev of a regular file; st_rdev of a block device"),
              Field("ino", "Q", "0 for a block device"),
              Field("size", "Q", "bytes; 0 for a block device (not checked)"),
              Field("mtime_ns", "q", "0 for a block device (not checked)"),
              Field("path_off", "I", "into the string table"),
              Field("path_len", "I"),
              Field("kind", "I", "WSR_KIND_*"),
              Field("flags", "I", "WSR_FILE_* bits (WSR_FILE_WARM_META only on a regular file, "
                                  "WSR_FILE_LIST_DIR only on a directory, WSR_FILE_AFTER_DIR on either)"),
              Field("meta_pos", "Q", "of a file or directory: its order in the metadata step, the byte "
                                     "offset on its file system's device of the inode its lookup reads "
                                     "(XFS, btrfs; btrfs's files raised by 2^56 where its directories go "
                                     "first); 0: not known, inode order"),
              Field("step_segment", "I", "of a file or directory in the metadata step: index into segments[] "
                                         "of the segment whose data needs it first; the step warms it just "
                                         "before that segment's ranges (0: before the pre-buffer)"),
              Field("pad", "4x"))
SEGMENT = Record("SEGMENT", 32,
                 Field("idx", "I", "1 = the pre-buffer"),
                 Field("first_range", "I", "index into ranges[]; segments tile ranges[] in order"),
                 Field("nranges", "I"),
                 Field("pad", "4x"),
                 Field("bytes", "Q"),
                 Field("cpu_ns", "Q", "the app's CPU time within the segment (unused since pacing went)"))
RANGE = Record("RANGE", 40,
               Field("offset", "Q", "bytes into the file / device"),
               Field("length", "Q", "bytes"),
               Field("sector", "Q", "LBA (512-byte sectors) on the device, for LBA sorting"),
               Field("file_no", "I", "index into files[]"),
               Field("orig_pos", "I", "position of the first access in the launch sequence (1-based)"),
               Field("segment", "I", "index into segments[]"),
               Field("pad", "4x"))

FORMAT = Format("wsr", "WSR", __doc__.split("\n\n")[0],
                {"WSR_MAGIC": MAGIC, "WSR_VERSION": VERSION,
                 "WSR_KIND_FILE": (KIND_FILE, "a regular file, opened by path"),
                 "WSR_KIND_BLOCKDEV": (KIND_BLOCKDEV, "a block device node: metadata read by LBA"),
                 "WSR_KIND_DIR": (KIND_DIR, "a directory on a marked file's path, as of the export: its "
                                  "(dev, inode) places it in the metadata step's order; no range reads it"),
                 "WSR_FILE_WARM_META": (FILE_WARM_META, "the metadata step looks the file up, and each "
                                        "directory on its path, before its step_segment's ranges (XFS, btrfs: "
                                        "their metadata is not in the block device's cache; warmstart/fs/metadata.py)"),
                 "WSR_FILE_LIST_DIR": (FILE_LIST_DIR, "the metadata step reads this directory whole "
                                       "(getdents), not only the lookups through it"),
                 "WSR_FILE_AFTER_DIR": (FILE_AFTER_DIR, "the metadata step warms this entry only after "
                                        "its directory's entry, in a later sweep up the meta_pos order "
                                        "where that directory comes after it (XFS: FileSystem.step_sweeps)"),
                 "WSR_FILE_FLAGS": (FILE_FLAGS, "every flag known; a file with others is refused"),
                 "WSR_MAX_FILES": (MAX_FILES, "reader limits: more is refused"), "WSR_MAX_RANGES": MAX_RANGES,
                 "WSR_MAX_PATH": (MAX_PATH, "bytes")},
                (HEADER, FILE, SEGMENT, RANGE))


class WsrFile(NamedTuple):
    path: bytes
    dev: int
    ino: int
    size: int
    mtime_ns: int
    kind: int = KIND_FILE
    flags: int = 0
    meta_pos: int = 0
    step_segment: int = 0


class WsrSegment(NamedTuple):
    idx: int
    first_range: int
    nranges: int
    bytes: int
    cpu_ns: int


class WsrRange(NamedTuple):
    """A range; its fields are RANGE's, in order (encode packs it as it is)."""
    offset: int
    length: int
    sector: int
    file_no: int
    orig_pos: int
    segment: int


assert WsrRange._fields == RANGE.names, "WsrRange must list RANGE's fields in order"
assert WsrSegment._fields == SEGMENT.names


class WsrContents(NamedTuple):
    """A schedule as the replayer sees it: what encode() writes and the C reader decodes."""
    schedule_id: int
    files: List[WsrFile]
    segments: List[WsrSegment]
    ranges: List[WsrRange]      # or plain tuples of its fields (replay/export.py, for speed)


def encode(c: WsrContents) -> bytes:
    strtab = bytearray()
    out = []
    for f in c.files:
        out.append(FILE.pack(dev=f.dev, ino=f.ino, size=f.size, mtime_ns=f.mtime_ns, path_off=len(strtab),
                             path_len=len(f.path), kind=f.kind, flags=f.flags, meta_pos=f.meta_pos,
                             step_segment=f.step_segment))
        strtab += f.path
    out.extend(starmap(SEGMENT.struct.pack, c.segments))
    out.extend(starmap(RANGE.struct.pack, c.ranges))     # the hot loop: `warmstart run` writes one per launch
    payload = b"".join(out) + bytes(strtab)
    fields = dict(magic=MAGIC, version=VERSION, header_size=HEADER.size, schedule_id=c.schedule_id,
                  nfiles=len(c.files), nsegments=len(c.segments), nranges=len(c.ranges), strtab_len=len(strtab),
                  payload_len=len(payload), payload_crc32=zlib.crc32(payload), reserved=0, reserved2=0)
    return HEADER.pack_crc("header_crc32", **fields) + payload


def verify(data: bytes):
    """Why `data` is not a valid export, or None: the header-level checks the C reader makes
    first (the C reader then checks every record; the Python side never reads exports back)."""
    if len(data) < HEADER.size:
        return "shorter than the header"
    h = HEADER.unpack(data)
    if h["magic"] != MAGIC or h["version"] != VERSION or h["header_size"] != HEADER.size:
        return "bad magic, version or header size"
    if not HEADER.crc_ok(h, "header_crc32"):
        return "header checksum mismatch"
    if len(data) != HEADER.size + h["payload_len"] or zlib.crc32(data[HEADER.size:]) != h["payload_crc32"]:
        return "size or payload checksum mismatch"
    return None
