"""Competitive gap merging (competitive-prefetching.md): read through a gap instead of switching.

Within a segment's fetch order, two consecutive ranges on one device with a forward gap of at most
C_switch x R_tr bytes (what the disk transfers during one average I/O switch) are read as one:
reading the gap costs at most one switch, so the merged plan is within 2x of the best one. With
a device profile the switch is the one for that gap's distance (`worth`): a short seek costs less
than the average one (1.9 ms against 9.3 ms on the emulated hdd7200), and reading 1.2 MiB through
every gap under the average filled the metadata sweep over the inode tables with megabytes of
other inodes. The gap bytes are waste (read, never used) and are counted.

A merged read must still land in the right page cache, so a gap is read through only when it can
be named: inside one file (both pieces of the same file, the gap being the file's bytes between
them) or between two block-device (metadata) ranges. A gap between different files is left as it
is (`skipped_gaps`); the block layer may still merge the two reads.
"""

from dataclasses import dataclass, replace
from typing import Callable, List, Optional, Sequence, Tuple

from .filemap import Piece


@dataclass
class GapStats:
    merged_gaps: int = 0
    waste_bytes: int = 0
    skipped_gaps: int = 0


def merge_gaps(pieces: Sequence[Piece], max_gap_bytes: int,
               worth: Optional[Callable[[int], bool]] = None) -> Tuple[List[Piece], GapStats]:
    """worth(gap bytes): is reading through this gap cheaper than skipping it (None: always)."""
    stats = GapStats()
    out: List[Piece] = []
    for q in pieces:
        if out:
            p = out[-1]
            gap = (q.sector - p.end) * 512
            if p.dev == q.dev and 0 <= gap <= max_gap_bytes and p.is_meta == q.is_meta and \
                    (worth is None or gap == 0 or worth(gap)):
                if p.file is None and q.file is None:
                    out[-1] = replace(p, nr_sectors=q.end - p.sector, length=(q.end - p.sector) * 512,
                                      first_p=min(p.first_p, q.first_p))
                elif (p.file is not None and p.file == q.file
                      and q.file_offset - (p.file_offset + p.length) == gap
                      and p.length == p.nr_sectors * 512):
                    out[-1] = replace(p, nr_sectors=q.end - p.sector,
                                      length=q.file_offset + q.length - p.file_offset,
                                      first_p=min(p.first_p, q.first_p))
                else:
                    if gap > 0:
                        stats.skipped_gaps += 1
                    out.append(q)
                    continue
                if gap > 0:
                    stats.merged_gaps += 1
                    stats.waste_bytes += gap
                continue
            if p.dev == q.dev and 0 < gap <= max_gap_bytes:
                stats.skipped_gaps += 1
        out.append(q)
    return out, stats
