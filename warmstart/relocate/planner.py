"""What goes where: the order of the relocation region, computed from schedules alone.

The region is one run of blocks. First a "common" part with the files several schedules read
(libc and friends), the most-read first, so each is placed once for all apps; then one part per
relocated app with its own files in the order its schedule fetches them (segment 1, the
pre-buffer, first). A piece is a run of blocks of one file: the whole file, or (granularity
"range") only the blocks launches touch, so a big library read in a few places does not drag its
untouched megabytes into the region. "auto" moves whole files unless less than half a big file
is touched.

Pure logic: inputs are schedules and per-file facts, the output is a list of pieces with their
offset in the region; relocate.py turns it into moves.
"""

from dataclasses import dataclass, field
from typing import Dict, List, Sequence, Tuple

from ..model import Schedule

GRANULARITIES = ("auto", "file", "range")
# Untouched gaps up to this size inside a file are moved along: cheaper to read through than to seek.
MERGE_GAP_BYTES = 64 * 1024
# "auto" moves files up to this size whole whatever fraction is touched.
SMALL_FILE_BYTES = 256 * 1024


@dataclass(frozen=True)
class Piece:
    path: bytes
    file_block: int       # first block of the piece in the file
    nblocks: int
    region_block: int     # where it goes: offset from the start of the region, in blocks
    region: str           # "common" or the app's name
    readers: int          # how many active schedules read this file


@dataclass
class Layout:
    block_size: int
    pieces: List[Piece] = field(default_factory=list)
    region_blocks: int = 0

    @property
    def region_bytes(self) -> int:
        return self.region_blocks * self.block_size


def touched_blocks(schedules: Sequence[Schedule], path: bytes, block_size: int) -> List[Tuple[int, int]]:
    """Union of the block runs [start, end) of `path` that the schedules read, merged over small gaps."""
    runs = []
    for s in schedules:
        for seg in s.segments:
            for r in seg.ranges:
                if r.file is not None and r.file.path == path and r.file_offset is not None:
                    runs.append((r.file_offset // block_size, -(-(r.file_offset + r.length) // block_size)))
    runs.sort()
    gap = max(1, MERGE_GAP_BYTES // block_size)
    merged: List[List[int]] = []
    for a, b in runs:
        if merged and a <= merged[-1][1] + gap:
            merged[-1][1] = max(merged[-1][1], b)
        else:
            merged.append([a, b])
    return [(a, b) for a, b in merged]


def first_touch_order(sched: Schedule) -> List[bytes]:
    """The schedule's files in the order it fetches them (segment by segment)."""
    seen: Dict[bytes, None] = {}
    for seg in sched.segments:
        for r in seg.ranges:
            if r.file is not None:
                seen.setdefault(r.file.path, None)
    return list(seen)


def plan_layout(targets: Dict[str, Schedule], all_active: Sequence[Schedule], file_blocks: Dict[bytes, int],
                block_size: int, page_blocks: int = 1, granularity: str = "auto") -> Layout:
    """Lay out the files of `targets` (app name -> schedule). `all_active` is every active schedule
    (for the reader counts and the union of touched ranges); `file_blocks` the movable files and
    their size in blocks (files not in it were refused and are skipped). A piece's region offset
    is congruent to its file offset modulo page_blocks, as EXT4_IOC_MOVE_EXT requires."""
    if granularity not in GRANULARITIES:
        raise ValueError(f"granularity must be one of {GRANULARITIES}")
    readers: Dict[bytes, int] = {}
    for s in all_active:
        for p in set(first_touch_order(s)):
            readers[p] = readers.get(p, 0) + 1
    order: Dict[str, List[bytes]] = {name: [p for p in first_touch_order(s) if p in file_blocks]
                                     for name, s in targets.items()}
    common_first: Dict[bytes, Tuple[int, str]] = {}
    for name, paths in order.items():
        for i, p in enumerate(paths):
            if readers.get(p, 0) > 1:
                # Tie-break by the earliest place any relocated app fetches it.
                common_first[p] = min(common_first.get(p, (i, name)), (i, name))
    common = sorted(common_first, key=lambda p: (-readers[p], common_first[p], p))
    layout = Layout(block_size)
    sequence = [("common", p) for p in common]
    for name, paths in order.items():
        sequence += [(name, p) for p in paths if p not in common_first]
    for region, path in sequence:
        for start, end in _pieces_of(path, file_blocks[path], all_active, block_size, granularity):
            offset = layout.region_blocks
            offset += (start - offset) % page_blocks   # keep page alignment in step
            layout.pieces.append(Piece(path, start, end - start, offset, region, readers.get(path, 0)))
            layout.region_blocks = offset + end - start
    return layout


def _pieces_of(path: bytes, nblocks: int, schedules: Sequence[Schedule], block_size: int,
               granularity: str) -> List[Tuple[int, int]]:
    if nblocks == 0:
        return []
    if granularity == "file":
        return [(0, nblocks)]
    runs = [(a, min(b, nblocks)) for a, b in touched_blocks(schedules, path, block_size) if a < nblocks]
    if not runs:
        return [(0, nblocks)]
    if granularity == "auto":
        touched = sum(b - a for a, b in runs)
        if nblocks * block_size <= SMALL_FILE_BYTES or 2 * touched >= nblocks:
            return [(0, nblocks)]
    return runs
