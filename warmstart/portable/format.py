"""The .wsched file: a schedule keyed by file identity, not by LBA.

Layout (little endian), checked on write (encode round-trips through decode) and on read:

    header   56 bytes  HEADER: magic "WSCHED\\r\\n", version, header size, payload length,
                       payload CRC-32, meta length, file/segment/range counts, string-table
                       length, reserved, header CRC-32 (computed with that field 0)
    payload  meta      UTF-8 JSON: app name, argv, algorithm, source machine, counts
             files     FILE each: path (offset+length in the string table), size, SHA-256
             segments  SEGMENT each: idx, first_p, last_p, first range, range count,
                       dropped device ranges, cpu_s, t_disk_s at the source, dropped bytes
             ranges    RANGE each: file index, byte offset, byte length (file order of fetch)
             strtab    raw bytes: paths and the executable (no encoding assumed: bytes on Linux)

"\\r\\n" in the magic catches text-mode mangling. Every offset and count is bounds-checked, so a
truncated or corrupt file is refused with the reason, never half-imported.
"""

import hashlib
import json
import os
import struct
import zlib
from dataclasses import dataclass, field
from typing import List

from ..errors import WarmstartError

MAGIC = b"WSCHED\r\n"
VERSION = 1
HEADER = struct.Struct("<8sIIQIIIIIIII")     # 56
FILE = struct.Struct("<IIQ32s")              # 48
SEGMENT = struct.Struct("<IIIIIIddQ")        # 48
RANGE = struct.Struct("<I4xQQ")              # 24
assert (HEADER.size, FILE.size, SEGMENT.size, RANGE.size) == (56, 48, 48, 24)
PAGE = 4096


@dataclass
class PFile:
    path: bytes
    size: int
    sha256: bytes          # content_hash() of the file's scheduled ranges


@dataclass
class PRange:
    file_no: int
    offset: int            # bytes into the file
    length: int


@dataclass
class PSegment:
    idx: int
    first_p: int
    last_p: int
    cpu_s: float
    t_disk_s: float        # at the source (re-modelled on import)
    ranges: List[PRange] = field(default_factory=list)
    dropped_device_ranges: int = 0     # metadata/device ranges not carried (LBAs are per machine)
    dropped_device_bytes: int = 0


@dataclass
class Portable:
    app_name: str
    executable: bytes
    argv: List[bytes]
    files: List[PFile]
    segments: List[PSegment]
    meta: dict = field(default_factory=dict)    # algorithm, probe, source host, schedule id, ...


def hashed_spans(ranges, size: int):
    """The byte spans content_hash() reads: the union of the ranges, widened to whole pages
    (what the replayer brings into the page cache) and clipped at the file's end."""
    spans = []
    for off, length in sorted(ranges):
        a, b = off // PAGE * PAGE, min(size, -(-(off + length) // PAGE) * PAGE)
        if a >= b:
            continue
        if spans and a <= spans[-1][1]:
            spans[-1][1] = max(spans[-1][1], b)
        else:
            spans.append([a, b])
    return [(a, b - a) for a, b in spans]


def content_hash(fd: int, ranges, size: int) -> bytes:
    """SHA-256 over the spans' (offset, length) and bytes; OSError if the file is shorter."""
    h = hashlib.sha256()
    for off, length in hashed_spans(ranges, size):
        h.update(struct.pack("<QQ", off, length))
        pos, end = off, off + length
        while pos < end:
            b = os.pread(fd, min(1 << 20, end - pos), pos)
            if not b:
                raise OSError(0, f"file ended at {pos}, expected {end} bytes")
            h.update(b)
            pos += len(b)
    return h.digest()


def encode(p: Portable) -> bytes:
    strtab = bytearray()

    def put(b: bytes):
        off = len(strtab)
        strtab.extend(b)
        return off, len(b)

    exe_off, exe_len = put(p.executable)
    argv = [put(a) for a in p.argv]
    meta = dict(p.meta, app=p.app_name, executable=[exe_off, exe_len], argv=argv)
    meta_b = json.dumps(meta, sort_keys=True).encode()
    files = b"".join(FILE.pack(*put(f.path), f.size, f.sha256) for f in p.files)
    segs, ranges = [], []
    for s in p.segments:
        segs.append(SEGMENT.pack(s.idx, s.first_p, s.last_p, len(ranges), len(s.ranges),
                                 s.dropped_device_ranges, s.cpu_s, s.t_disk_s, s.dropped_device_bytes))
        ranges.extend(RANGE.pack(r.file_no, r.offset, r.length) for r in s.ranges)
    payload = meta_b + files + b"".join(segs) + b"".join(ranges) + bytes(strtab)
    fields = [MAGIC, VERSION, HEADER.size, len(payload), zlib.crc32(payload), len(meta_b),
              len(p.files), len(p.segments), len(ranges), len(strtab), 0, 0]
    fields[-1] = zlib.crc32(HEADER.pack(*fields))
    data = HEADER.pack(*fields) + payload
    decode(data)   # checked on write as on read (STYLE habit 4)
    return data


def decode(data: bytes, name: str = "schedule file") -> Portable:
    """Parse and verify a .wsched; WarmstartError naming the problem if it is not a valid one."""
    def bad(why):
        return WarmstartError(f"{name} is not a usable portable schedule: {why}; "
                              f"export it again with `warmstart export NAME > FILE` and copy it in binary mode")
    if len(data) < HEADER.size:
        raise bad(f"only {len(data)} bytes, shorter than the {HEADER.size}-byte header (truncated?)")
    h = list(HEADER.unpack_from(data))
    if h[0] != MAGIC:
        raise bad(f"bad magic {h[0]!r} (not a warmstart export, or mangled as text)")
    if h[1] != VERSION:
        raise bad(f"format version {h[1]}, this warmstart reads version {VERSION}")
    crc, h[-1] = h[-1], 0
    if h[2] != HEADER.size or zlib.crc32(HEADER.pack(*h)) != crc:
        raise bad("header checksum mismatch (corrupt)")
    _, _, hsize, plen, pcrc, mlen, nfiles, nsegs, nranges, slen, _, _ = h
    if len(data) != hsize + plen:
        raise bad(f"{len(data)} bytes, the header says {hsize + plen} (truncated or appended to)")
    payload = memoryview(data)[hsize:]
    if zlib.crc32(payload) != pcrc:
        raise bad("payload checksum mismatch (corrupt)")
    if mlen + nfiles * FILE.size + nsegs * SEGMENT.size + nranges * RANGE.size + slen != plen:
        raise bad("section sizes do not add up to the payload")
    pos = mlen
    strtab = bytes(payload[plen - slen:])

    def string(off, length):
        if off + length > slen:
            raise bad("a string points outside the string table")
        return strtab[off:off + length]
    try:
        meta = json.loads(bytes(payload[:mlen]))
        exe = string(*meta.pop("executable"))
        argv = [string(o, n) for o, n in meta.pop("argv")]
        app = meta.pop("app")
    except (ValueError, KeyError, TypeError) as e:
        raise bad(f"bad metadata ({e})")
    files = []
    for i in range(nfiles):
        off, length, size, digest = FILE.unpack_from(payload, pos + i * FILE.size)
        files.append(PFile(string(off, length), size, digest))
    pos += nfiles * FILE.size
    raw_ranges = [RANGE.unpack_from(payload, pos + nsegs * SEGMENT.size + i * RANGE.size) for i in range(nranges)]
    segments = []
    for i in range(nsegs):
        idx, fp, lp, first, n, dropped, cpu, tdisk, dbytes = SEGMENT.unpack_from(payload, pos + i * SEGMENT.size)
        if first + n > nranges:
            raise bad(f"segment {idx} points outside the range table")
        rs = []
        for file_no, off, length in raw_ranges[first:first + n]:
            if file_no >= nfiles:
                raise bad(f"a range of segment {idx} names file {file_no} of {nfiles}")
            rs.append(PRange(file_no, off, length))
        segments.append(PSegment(idx, fp, lp, cpu, tdisk, rs, dropped, dbytes))
    return Portable(app, exe, argv, files, segments, meta)
