"""What a recording mapped: how many of the launch's files have a path and extents, how many of
its page-cache bytes they hold, and how much of its block reads falls in their extents; and each
file it could not map, with the reason. `record` prints it and stores it in the recording's env
("mapping"), so nothing is dropped without a word."""

import os
from typing import Callable, Dict, List, Optional, Sequence, Tuple

from ..devices import disk_of
from ..fs import FileSystems
from ..model import BlockRequest, FileInfo, PageAdd

PAGE = 4096
NAMED_MAX = 50     # unmapped files named one by one in the statement (the rest are counted)


def _extent_index(files: Sequence[FileInfo], fss: FileSystems) -> Dict[int, List[Tuple[int, int]]]:
    """Sorted sector intervals of the mapped files' extents, per block device (the file system's
    data device, and its whole disk at the partition's offset)."""
    idx: Dict[int, List[Tuple[int, int]]] = {}
    for f in files:
        fs = fss.of_dev(f.dev)
        dev = fs.data_device() if fs is not None else None
        if f.path is None or not f.extents or dev is None:
            continue
        disk, start = disk_of(dev)
        for e in f.extents:
            lo, hi = e.physical // 512, -(-(e.physical + e.length) // 512)
            idx.setdefault(dev, []).append((lo, hi))
            if disk != dev:
                idx.setdefault(disk, []).append((start + lo, start + hi))
    for lst in idx.values():
        lst.sort()
    return idx


def _covered(idx: Dict[int, List[Tuple[int, int]]], r: BlockRequest) -> int:
    """Sectors of request r inside the mapped extents (intervals may overlap: count each once)."""
    cur, end, n = r.sector, r.sector + r.nr_sectors, 0
    for lo, hi in idx.get(r.dev, ()):
        if hi <= cur:
            continue
        if lo >= end:
            break
        lo = max(lo, cur)
        n += min(hi, end) - lo
        cur = min(hi, end)
        if cur >= end:
            break
    return n


def statement(files: Sequence[FileInfo], reasons: Dict[Tuple[int, int], str], adds: Sequence[PageAdd],
              requests: Sequence[BlockRequest], fss: FileSystems, by_name: int, by_walk: int) -> dict:
    """The mapping statement of a recording (see the module's doc)."""
    pages: Dict[Tuple[int, int], int] = {}
    for a in adds:
        pages[(a.dev, a.ino)] = pages.get((a.dev, a.ino), 0) + a.nr_pages
    mapped = [f for f in files if f.path is not None]
    unmapped = []
    for f in files:
        if f.path is not None:
            continue
        fs = fss.of_dev(f.dev)
        why = reasons.get((f.dev, f.ino)) or (fs.cannot_map() if fs else None) or "path not found"
        unmapped.append({"dev": f"{os.major(f.dev)}:{os.minor(f.dev)}", "ino": f.ino,
                         "fstype": fs.mount.fstype if fs else None,
                         "bytes": pages.get((f.dev, f.ino), 0) * PAGE, "reason": why})
    unmapped.sort(key=lambda u: -u["bytes"])
    no_extents = [os.fsdecode(f.path) for f in mapped if f.size and not f.extents]
    reads = [r for r in requests if not r.is_write]
    idx = _extent_index(files, fss)
    read_b = sum(r.nr_sectors for r in reads) * 512
    in_files = sum(_covered(idx, r) for r in reads) * 512
    meta = sum(r.nr_sectors for r in reads if r.is_meta) * 512
    total_pages = sum(pages.values())
    mapped_pages = sum(pages.get((f.dev, f.ino), 0) for f in mapped)
    return {
        "files": len(files), "mapped_files": len(mapped), "by_name": by_name, "by_walk": by_walk,
        "file_bytes": total_pages * PAGE, "mapped_bytes": mapped_pages * PAGE,
        "mapped_pct": round(100.0 * mapped_pages / total_pages, 1) if total_pages else None,
        "read_bytes": read_b, "read_bytes_in_files": in_files, "read_bytes_meta": meta,
        "reads_in_files_pct": round(100.0 * in_files / read_b, 1) if read_b else None,
        "file_systems": sorted({fss.of_dev(f.dev).name for f in mapped if fss.of_dev(f.dev)}),
        "unmapped": unmapped[:NAMED_MAX], "unmapped_files": len(unmapped),
        "without_extents": no_extents[:NAMED_MAX],
    }


def describe(m: Optional[dict], say: Callable[[str], None]) -> None:
    """The statement in words, a line each (nothing for recordings made before it existed)."""
    if not m:
        return
    mib = 1048576
    share = "" if m["mapped_pct"] is None else f" ({m['mapped_pct']}%)"
    if m["reads_in_files_pct"] is None:
        reads = "no block reads"
    else:
        reads = (f"{m['reads_in_files_pct']}% of the launch's {m['read_bytes'] / mib:.1f} MiB of block reads "
                 f"lie in them")
        if m["read_bytes_meta"]:
            reads += f", {m['read_bytes_meta'] / mib:.1f} MiB are metadata"
    say(f"mapped {m['mapped_files']} of {m['files']} files to paths ({m['by_name']} by the names opened, "
        f"{m['by_walk']} by walking), {m['mapped_bytes'] / mib:.1f} of {m['file_bytes'] / mib:.1f} MiB "
        f"of file data{share}; {reads}")
    for u in m["unmapped"]:
        say(f"  not mapped: dev {u['dev']} ino {u['ino']} ({u['fstype'] or 'no file system'}, "
            f"{u['bytes'] // 1024} KiB): {u['reason']}")
    if m["unmapped_files"] > len(m["unmapped"]):
        say(f"  ... and {m['unmapped_files'] - len(m['unmapped'])} more not mapped")
    for p in m["without_extents"]:
        say(f"  no extents (no FIEMAP, or inline data): {p}")
