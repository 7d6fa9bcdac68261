"""Parse the text lines of a tracefs instance (trace_pipe) and assemble block requests.

A line looks like (with options/record-tgid; the TGID column is absent without it):
    cat-24697   (  24697) [001] .....  1152.367859: block_bio_queue: 254,0 RA 23654240 + 8 [cat]
The timestamp is CLOCK_MONOTONIC (the instance's trace_clock is set to "mono") in seconds with
microsecond digits; we keep integer nanoseconds.
"""

import os
import re
from dataclasses import dataclass
from typing import Dict, Iterable, List, Optional, Tuple

from ..model import BlockRequest

_LINE = re.compile(
    rb"^\s*(?P<comm>.*?)-(?P<pid>\d+)\s+(?:\(\s*(?P<tgid>[\d-]+)\)\s+)?\[(?P<cpu>\d+)\]\s+(?:\S+\s+)?"
    rb"(?P<sec>\d+)\.(?P<frac>\d+):\s+(?P<event>\w+):\s(?P<body>.*)$")
_DEV_SECTOR = re.compile(rb"^(\d+),(\d+) (\S+) (?:\d+ \([^)]*\) )?(\d+) \+ (\d+)")
_DEV_SECTOR_COMPLETE = re.compile(rb"^(\d+),(\d+) (\S+) \([^)]*\) (\d+) \+ (\d+)")
_BRACKET_COMM = re.compile(rb"\[(.*)\]\s*$")

PAGE_SHIFT = 12
# The file and pages of a filemap event (offsets in bytes): mm_filemap_add_to_page_cache
# "dev M:m ino X pfn=.. ofs=A order=N", mm_filemap_get_pages / map_pages "dev=M:m ino=X ofs=A-B",
# mm_filemap_fault "dev=M:m ino=X ofs=A"
_DEV_INO = re.compile(rb"dev[ =](\d+):(\d+) ino[ =]([0-9a-f]+)")
_OFS = re.compile(rb"ofs=(\d+)(?:-(\d+)| order=(\d+))?")
# page_cache_sync_ra / async_ra: "dev=M:m ino=X index=N req_count=C ..." (pages)
READAHEAD = re.compile(rb"dev=(\d+):(\d+) ino=([0-9a-f]+) index=(\d+) req_count=(\d+)")
USE_EVENTS = ("mm_filemap_get_pages", "mm_filemap_map_pages", "mm_filemap_fault")
RA_EVENTS = ("page_cache_sync_ra", "page_cache_async_ra")


@dataclass
class Event:
    ts_ns: int
    cpu: int
    tid: int
    tgid: Optional[int]
    comm: str
    name: str
    body: bytes


def _ns(sec: bytes, frac: bytes) -> int:
    # the fraction has 6 digits (us) for clocks in ns; pad/trim generically
    f = (frac + b"000000000")[:9]
    return int(sec) * 1_000_000_000 + int(f)


def filemap_pages(body: bytes) -> Optional[Tuple[int, int, int, int]]:
    """(dev, ino, first page, number of pages) of a filemap event's body; None if it names none.
    The one parser of the filemap events' pages (page adds, page uses, page-use tracing, speculation)."""
    d, o = _DEV_INO.search(body), _OFS.search(body)
    if d is None or o is None:
        return None
    first = int(o.group(1)) >> PAGE_SHIFT
    if o.group(2) is not None:
        n = (int(o.group(2)) >> PAGE_SHIFT) - first + 1
    else:
        order = int(o.group(3) or 0)
        n = 1 << order if order < 64 else 0
    dev, ino = makedev(d.group(1), d.group(2)), int(d.group(3), 16)
    if dev is None or n < 1 or not _fits(ino, first + n):
        return None
    return dev, ino, first, n


def readahead_pages(body: bytes) -> Optional[Tuple[int, int, int, int]]:
    """(dev, ino, first page, number of pages) a page_cache_sync_ra / async_ra event asked for
    (req_count pages from index, at least one); None if it names none."""
    m = READAHEAD.search(body)
    if not m:
        return None
    dev, ino = makedev(m.group(1), m.group(2)), int(m.group(3), 16)
    first, n = int(m.group(4)), max(1, int(m.group(5)))
    if dev is None or first + n + ino >= 1 << 63:
        return None
    return dev, ino, first, n


def parse_line(line: bytes) -> Optional[Event]:
    """One trace_pipe line as an Event; None for headers, comments and lines we do not know."""
    if not line or line.startswith(b"#"):
        return None
    m = _LINE.match(line.rstrip(b"\n"))
    if not m:
        return None
    tgid = m.group("tgid")
    return Event(ts_ns=_ns(m.group("sec"), m.group("frac")), cpu=int(m.group("cpu")),
                 tid=int(m.group("pid")),
                 tgid=int(tgid) if tgid and tgid.isdigit() else None,
                 comm=m.group("comm").decode("utf-8", "replace"),
                 name=m.group("event").decode(), body=m.group("body"))


def parse_lines(lines: Iterable[bytes]) -> List[Event]:
    """Events from trace_pipe lines; headers, comments and lines we do not know are skipped."""
    return [ev for ev in map(parse_line, lines) if ev is not None]


def makedev(major: bytes, minor: bytes) -> Optional[int]:
    """dev_t of a traced major:minor; None for numbers no device can have (the kernel's dev_t
    has 12 bits of major, 20 of minor): a corrupt line is skipped, it does not stop a recording."""
    ma, mi = int(major), int(minor)
    if ma >= 1 << 12 or mi >= 1 << 20:
        return None
    return os.makedev(ma, mi)


def _fits(*values: int) -> bool:
    """Every value fits the database's signed 64-bit INTEGER (sectors, inodes, pages)."""
    return all(v < 1 << 63 for v in values)


def _bracket_comm(body: bytes) -> Optional[str]:
    m = _BRACKET_COMM.search(body)
    return m.group(1).decode("utf-8", "replace") if m else None


def assemble_requests(events: Iterable[Event]) -> List[BlockRequest]:
    """Block requests in issue order from block_bio_queue / block_rq_issue / block_rq_complete.

    The submitter of a request is the task that queued its first bio (block_bio_queue runs in
    the submitter's context, block_rq_issue may run in a kworker's); queue_ns is the earliest
    queue time of the bios the request covers. Zero-length requests (flushes) are dropped.
    """
    pending_bios: Dict[int, List[Tuple[int, int, int, int, Optional[int], str]]] = {}
    inflight: Dict[Tuple[int, int], List[BlockRequest]] = {}
    requests: List[BlockRequest] = []
    for ev in events:
        if ev.name == "block_bio_queue":
            m = _DEV_SECTOR.match(ev.body)
            dev = makedev(m.group(1), m.group(2)) if m else None
            if dev is not None and _fits(int(m.group(4)), int(m.group(5))):
                pending_bios.setdefault(dev, []).append(
                    (int(m.group(4)), int(m.group(5)), ev.ts_ns, ev.tid, ev.tgid, _bracket_comm(ev.body) or ev.comm))
        elif ev.name == "block_rq_issue":
            m = _DEV_SECTOR.match(ev.body)
            if not m or int(m.group(5)) == 0:
                continue
            dev, sector, nr = makedev(m.group(1), m.group(2)), int(m.group(4)), int(m.group(5))
            if dev is None or not _fits(sector + nr):
                continue
            req = BlockRequest(dev=dev, sector=sector, nr_sectors=nr, rwbs=m.group(3).decode(),
                               issue_ns=ev.ts_ns, tid=ev.tid, pid=ev.tgid, comm=ev.comm)
            bios = pending_bios.get(dev, [])
            covered = [b for b in bios if sector <= b[0] < sector + nr]
            if covered:
                first = next((b for b in covered if b[0] == sector), covered[0])
                req.queue_ns = min(b[2] for b in covered)
                req.tid, req.pid, req.comm = first[3], first[4], first[5]
                pending_bios[dev] = [b for b in bios if not (sector <= b[0] < sector + nr)]
            requests.append(req)
            inflight.setdefault((dev, sector), []).append(req)
        elif ev.name == "block_rq_complete":
            m = _DEV_SECTOR_COMPLETE.match(ev.body)
            if not m:
                continue
            key = (makedev(m.group(1), m.group(2)), int(m.group(4)))
            waiting = inflight.get(key)
            if waiting:
                waiting.pop(0).complete_ns = ev.ts_ns
    return requests
