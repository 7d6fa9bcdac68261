"""DISK_ACCESS implementations behind one interface (segment.Cost): the model and the real disk.

- ModelCost: the device profile's estimate (DiskProfile, model.py), no I/O; thousands of calls per second.
- DiskCost: reads the segment's ranges in fetch order from the block device with O_DIRECT through
  warmstart-probe, so the device is timed and not the page cache. Before each probe the head is put
  at a fixed place (a 4 KiB read at offset 0, not counted) so repeated probes start alike. A time
  budget bounds the total probing; once spent, the search stops asking for new measurements.
"""

import time
from typing import Dict, List, Optional, Tuple


from ..model import DiskProfile
from .ordering import PieceTable
from ..errors import WarmstartError
from .probe import check_direct, device_path, run
from .segment import Cost


def _merge_contiguous(starts, lengths) -> List[Tuple[int, int]]:
    out: List[Tuple[int, int]] = []
    for s, n in zip(starts.tolist(), lengths.tolist()):
        if out and out[-1][0] + out[-1][1] == s:
            out[-1] = (out[-1][0], out[-1][1] + n)
        else:
            out.append((s, n))
    return out


class ModelCost(Cost):
    def __init__(self, table: PieceTable, profile: DiskProfile):
        super().__init__()
        self.table, self.profile = table, profile

    def measure(self, a: int, b: int) -> float:
        dev, start, length = self.table.arrays(a, b)
        return self.profile.access_time_arrays(dev, start, length)


class DiskCost(Cost):
    """Devices that cannot be read with O_DIRECT (another file system the launch touched, e.g. the
    root disk of a chroot) are costed by their profile in `fallback` if there is one, else not
    at all; `unprobed` says which and why, and the analysis reports it."""

    def __init__(self, table: PieceTable, budget_s: Optional[float] = None,
                 paths: Optional[Dict[int, str]] = None, fallback: Optional[Dict[int, DiskProfile]] = None):
        super().__init__()
        self.table = table
        self.paths = {d: p for d, p in (paths or {}).items() if p}
        self.fallback = dict(fallback or {})
        self.unprobed: Dict[int, str] = {}
        self.deadline = None if budget_s is None else time.monotonic() + budget_s
        self.probe_s = 0.0

    def exhausted(self) -> bool:
        return self.deadline is not None and time.monotonic() > self.deadline

    def path(self, dev: int) -> Optional[str]:
        """The device node to probe, or None (and the reason in unprobed) if it cannot be."""
        if dev in self.unprobed:
            return None
        if dev not in self.paths:
            try:
                self.paths[dev] = device_path(dev)
                check_direct(self.paths[dev])
            except WarmstartError as e:
                self.paths.pop(dev, None)
                self.unprobed[dev] = str(e)
                return None
        return self.paths[dev]

    def measure(self, a: int, b: int) -> float:
        dev, start, length = self.table.arrays(a, b)
        total = 0.0
        # Runs of one device in fetch order; each run is one probe (the replay reads them in order).
        i, n = 0, len(dev)
        while i < n:
            j = i
            while j < n and dev[j] == dev[i]:
                j += 1
            path = self.path(int(dev[i]))
            if path is None:
                prof = self.fallback.get(int(dev[i]))
                if prof is not None:
                    total += prof.access_time_arrays(dev[i:j], start[i:j], length[i:j])
                i = j
                continue
            ranges = [(0, 4096)] + _merge_contiguous(start[i:j], length[i:j])
            r = run(path, ranges)
            total += r.elapsed_s - r.request_s[0]
            i = j
        self.probe_s += total
        return total
