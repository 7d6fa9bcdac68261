"""Striped arrays (strip-aligned-prefetching-raid.md): strip alignment and whole-stripe reads.

On RAID-0 a request that crosses a strip boundary occupies two member disks ("independency loss"),
so each read is split at strip boundaries (SASEQP). A long sequential run is widened to whole
stripes (MSP) so every member disk works on it in parallel; the added bytes are waste, counted.
Geometry comes from sysfs (md: chunk_size, raid_disks) or --strip-size/--stripe-disks. This
kernel has no md, so this is tested on synthetic geometry only.
"""

from dataclasses import replace
from typing import List, Sequence, Tuple

from ..devices import sysfs_path
from .filemap import Piece


def geometry_from_sysfs(dev: int) -> Tuple[int, int]:
    """(strip bytes, member disks) of an md array, or (0, 0) when dev is not striped."""
    base = sysfs_path(dev) + "/md"
    try:
        with open(base + "/level") as f:
            if f.read().strip() not in ("raid0", "raid10", "raid5", "raid6"):
                return 0, 0
        with open(base + "/chunk_size") as f:
            strip = int(f.read())
        with open(base + "/raid_disks") as f:
            disks = int(f.read())
        return strip, disks
    except (OSError, ValueError):
        return 0, 0


def split_at_strips(pieces: Sequence[Piece], strip_bytes: int) -> List[Piece]:
    """Every piece split so none crosses a strip boundary (coverage unchanged)."""
    if strip_bytes <= 0:
        return list(pieces)
    strip = strip_bytes // 512
    out: List[Piece] = []
    for p in pieces:
        s = p.sector
        while s < p.end:
            e = min(p.end, (s // strip + 1) * strip)
            off = (s - p.sector) * 512
            length = max(0, min((e - s) * 512, p.length - off))
            if length > 0 or p.file is None:
                out.append(replace(p, sector=s, nr_sectors=e - s,
                                   file_offset=p.file_offset + off if p.file is not None else 0,
                                   length=length if p.file is not None else (e - s) * 512))
            s = e
    return out


def whole_stripes(pieces: Sequence[Piece], strip_bytes: int, disks: int, min_run_bytes: int = 0) -> Tuple[List[Piece], int]:
    """Widen contiguous runs of at least min_run_bytes (default one stripe) to whole stripes by
    adding block-device reads before and after; returns (pieces, waste bytes)."""
    if strip_bytes <= 0 or disks <= 1:
        return list(pieces), 0
    stripe = strip_bytes * disks // 512
    min_run = (min_run_bytes or strip_bytes * disks) // 512
    out: List[Piece] = []
    waste = 0
    i = 0
    while i < len(pieces):
        j = i + 1
        while j < len(pieces) and pieces[j].dev == pieces[i].dev and pieces[j].sector == pieces[j - 1].end:
            j += 1
        run = pieces[i:j]
        lo, hi = run[0].sector, run[-1].end
        if hi - lo >= min_run:
            a, b = lo // stripe * stripe, -(-hi // stripe) * stripe
            if out and out[-1].dev == run[0].dev and out[-1].end > a:
                a = min(lo, out[-1].end)  # do not read the previous run's stripe twice
            if i + len(run) < len(pieces) and pieces[j].dev == run[0].dev and pieces[j].sector < b:
                b = max(hi, pieces[j].sector)
            if a < lo:
                out.append(Piece(run[0].dev, a, lo - a, False, None, 0, (lo - a) * 512, run[0].first_p))
                waste += (lo - a) * 512
            out.extend(run)
            if b > hi:
                out.append(Piece(run[0].dev, hi, b - hi, False, None, 0, (b - hi) * 512, run[-1].first_p))
                waste += (b - hi) * 512
        else:
            out.extend(run)
        i = j
    return out, waste
