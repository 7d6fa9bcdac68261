"""The .wsched file: a schedule keyed by file identity, not by LBA. Its layout is defined in
warmstart/formats/wsched.py; this module turns a Portable into those bytes and back.

Checked on write (encode round-trips through decode) and on read: every offset and count is
bounds-checked, so a truncated or corrupt file is refused with the reason, never half-imported.
"""

import hashlib
import json
import os
import struct
import zlib
from dataclasses import dataclass, field
from typing import List

from ..errors import WarmstartError
from ..formats.wsched import FILE, HEADER, MAGIC, RANGE, SEGMENT, VERSION

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
    files = bytearray()
    for f in p.files:
        path_off, path_len = put(f.path)
        files += FILE.pack(path_off=path_off, path_len=path_len, size=f.size, sha256=f.sha256)
    segs, ranges = [], []
    for s in p.segments:
        segs.append(SEGMENT.pack(idx=s.idx, first_p=s.first_p, last_p=s.last_p, first_range=len(ranges),
                                 nranges=len(s.ranges), dropped_device_ranges=s.dropped_device_ranges,
                                 cpu_s=s.cpu_s, t_disk_s=s.t_disk_s, dropped_device_bytes=s.dropped_device_bytes))
        ranges.extend(RANGE.pack(file_no=r.file_no, offset=r.offset, length=r.length) for r in s.ranges)
    payload = meta_b + bytes(files) + b"".join(segs) + b"".join(ranges) + bytes(strtab)
    fields = dict(magic=MAGIC, version=VERSION, header_size=HEADER.size, payload_len=len(payload),
                  payload_crc32=zlib.crc32(payload), meta_len=len(meta_b), nfiles=len(p.files),
                  nsegments=len(p.segments), nranges=len(ranges), strtab_len=len(strtab), reserved=0)
    data = HEADER.pack_crc("header_crc32", **fields) + payload
    decode(data)   # checked on write as on read (STYLE habit 4)
    return data


def decode(data: bytes, name: str = "schedule file") -> Portable:
    """Parse and verify a .wsched; WarmstartError naming the problem if it is not a valid one."""
    def bad(why):
        return WarmstartError(f"{name} is not a usable portable schedule: {why}; "
                              f"export it again with `warmstart export NAME > FILE` and copy it in binary mode")
    if len(data) < HEADER.size:
        raise bad(f"only {len(data)} bytes, shorter than the {HEADER.size}-byte header (truncated?)")
    h = HEADER.unpack(data)
    if h["magic"] != MAGIC:
        raise bad(f"bad magic {h['magic']!r} (not a warmstart export, or mangled as text)")
    if h["version"] != VERSION:
        raise bad(f"format version {h['version']}, this warmstart reads version {VERSION}")
    if h["header_size"] != HEADER.size or not HEADER.crc_ok(h, "header_crc32"):
        raise bad("header checksum mismatch (corrupt)")
    hsize, plen, mlen, slen = h["header_size"], h["payload_len"], h["meta_len"], h["strtab_len"]
    nfiles, nsegs, nranges = h["nfiles"], h["nsegments"], h["nranges"]
    if len(data) != hsize + plen:
        raise bad(f"{len(data)} bytes, the header says {hsize + plen} (truncated or appended to)")
    payload = memoryview(data)[hsize:]
    if zlib.crc32(payload) != h["payload_crc32"]:
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
        f = FILE.unpack(payload, pos + i * FILE.size)
        files.append(PFile(string(f["path_off"], f["path_len"]), f["size"], f["sha256"]))
    pos += nfiles * FILE.size
    raw_ranges = [RANGE.struct.unpack_from(payload, pos + nsegs * SEGMENT.size + i * RANGE.size)
                  for i in range(nranges)]     # (file_no, offset, length): RANGE.names order
    segments = []
    for i in range(nsegs):
        sg = SEGMENT.unpack(payload, pos + i * SEGMENT.size)
        idx, first, n = sg["idx"], sg["first_range"], sg["nranges"]
        if first + n > nranges:
            raise bad(f"segment {idx} points outside the range table")
        rs = []
        for file_no, off, length in raw_ranges[first:first + n]:
            if file_no >= nfiles:
                raise bad(f"a range of segment {idx} names file {file_no} of {nfiles}")
            rs.append(PRange(file_no, off, length))
        segments.append(PSegment(idx, sg["first_p"], sg["last_p"], sg["cpu_s"], sg["t_disk_s"], rs,
                                 sg["dropped_device_ranges"], sg["dropped_device_bytes"]))
    return Portable(app, exe, argv, files, segments, meta)
