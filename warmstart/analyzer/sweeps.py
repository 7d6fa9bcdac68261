"""Pieces of a later segment read by an earlier sweep that passes near them.

The segmentation cuts the launch sequence P into consecutive runs p_a..p_b, and each segment is
fetched in one LBA-sorted sweep. A piece of a later segment often lies a few hundred KiB from a
piece an earlier sweep reads anyway (pycompile on the emulated hdd7200: 72 of the 81 ranges of
segments 2-6 lay within the read-through distance of segment 1's): fetching it in its own sweep
costs a switch there, after the release, while the app may be waiting; fetching it in the
earlier sweep costs its transfer and the short hop to it.

pull_forward moves such a piece, one at a time, when the device profile says the launch gets
shorter: the earlier segment's fetch grows by what inserting the piece into its sweep costs,
the later one's shrinks by what removing it saves, and T = max_j (t_1 + .. + t_j + CPU of
segments j..m) (segment.segments_launch_time) must drop. The segments' times start from the
analysis's own (disk-timed where it probed) and change by the model's differences. CPU stays with
its segment: it belongs to the accesses, not to where their blocks are read.
"""

from dataclasses import dataclass
from typing import List, Sequence, Tuple

from ..model import DiskProfile
from .filemap import Piece
from .ordering import fetch_order
from .segment import segments_launch_time


@dataclass
class Pulled:
    pieces: int = 0          # pieces moved to an earlier sweep
    bytes: int = 0
    t_before_s: float = 0.0  # T of the segments before and after (the profile's differences)
    t_after_s: float = 0.0

    def to_json(self) -> dict:
        return {"pieces": self.pieces, "bytes": self.bytes, "t_before_s": self.t_before_s, "t_after_s": self.t_after_s}


def _cost(pieces: Sequence[Piece], prof: DiskProfile, metadata_first: bool) -> float:
    return prof.access_time([(p.dev, p.sector * 512, p.nr_sectors * 512) for p in fetch_order(pieces, metadata_first)])


@dataclass
class Sweeps:
    """Segments as spans of P (0-based, inclusive), their pieces in fetch order, fetch and CPU times."""
    spans: List[Tuple[int, int]]
    pieces: List[List[Piece]]
    t_disk: List[float]
    cpu: List[float]


def pull_forward(sw: Sweeps, prof: DiskProfile, metadata_first: bool = True) -> Tuple[Sweeps, Pulled]:
    """sw after moving later segments' pieces into earlier sweeps wherever the profile says T
    drops; a segment left with nothing to read joins the one before (its CPU with it)."""
    stats = Pulled()
    segs, t = _pull(sw.pieces, sw.t_disk, sw.cpu, prof, metadata_first, stats)
    spans, cpu = list(sw.spans), list(sw.cpu)
    for k in range(len(spans) - 1, 0, -1):
        if not segs[k]:
            spans[k - 1] = (spans[k - 1][0], spans[k][1])
            cpu[k - 1] += cpu[k]
            t[k - 1] += t[k]
            del spans[k], segs[k], cpu[k], t[k]
    stats.t_after_s = segments_launch_time(t, cpu)
    return Sweeps(spans, segs, t, cpu), stats


def _pull(segments: List[List[Piece]], t_disk: Sequence[float], cpu: Sequence[float], prof: DiskProfile,
          metadata_first: bool, stats: Pulled) -> Tuple[List[List[Piece]], List[float]]:
    segs = [list(fetch_order(s, metadata_first)) for s in segments]
    t = list(t_disk)
    cost = [_cost(s, prof, metadata_first) for s in segs]
    stats.t_before_s = best_t = segments_launch_time(t, cpu)
    for j in range(1, len(segs)):
        for p in list(segs[j]):
            rest = [q for q in segs[j] if q is not p]
            saved = cost[j] - _cost(rest, prof, metadata_first)
            choice = None
            for i in range(j):
                added = _cost(segs[i] + [p], prof, metadata_first) - cost[i]
                trial = list(t)
                trial[i] += added
                trial[j] -= saved
                total = segments_launch_time(trial, cpu)
                if total < best_t - 1e-9 and trial[j] >= 0:
                    best_t, choice = total, (i, added)
            if choice is None:
                continue
            i, added = choice
            segs[i] = fetch_order(segs[i] + [p], metadata_first)
            segs[j] = rest
            cost[i] += added
            cost[j] -= saved
            t[i] += added
            t[j] -= saved
            stats.pieces += 1
            stats.bytes += p.length
    return segs, t
