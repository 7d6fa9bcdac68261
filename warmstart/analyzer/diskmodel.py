"""DISK_ACCESS from a device profile: the modelled time to read a list of ranges in the given order.

Per range: a fixed per-request overhead, then
- nothing more if it starts where the previous one ended (one streaming transfer),
- for a short forward gap the drive streams through (<= stream_bytes): the gap's transfer time
  or a switch, whichever is less,
- otherwise an I/O switch: seek(distance) with the average rotational delay folded in,
  as measured by `profile-disk` (competitive-prefetching.md §5: f_seek, f_transfer),
then the transfer at the rate of that location. The first range, and a change of device, cost
one average switch (C_switch): where the head was is unknown.

The model runs on numpy arrays because the optimising segmentation calls it thousands of times.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, List, Sequence, Tuple

if TYPE_CHECKING:
    import numpy as np  # numpy is imported where the model runs, not when the CLI starts


@dataclass
class DiskProfile:
    seek_curve: List[Tuple[float, float]]      # (distance bytes, seconds incl. avg rotation), ascending
    rate_curve: List[Tuple[float, float]]      # (byte offset, bytes/s), ascending
    overhead_s: float                          # per request, beyond seek and transfer
    stream_bytes: float                        # forward gaps the drive streams through
    c_switch_s: float                          # average I/O switch (competitive-prefetching.md)
    r_tr_Bps: float                            # average sequential transfer rate
    size_bytes: int = 0
    device: str = ""
    strip_bytes: int = 0                       # striped array geometry (0: not striped)
    stripe_disks: int = 0
    extra: dict = field(default_factory=dict)  # raw probe data and fit errors, for the report

    def to_json(self) -> str:
        return json.dumps(asdict(self), sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> "DiskProfile":
        d = json.loads(text)
        d["seek_curve"] = [tuple(x) for x in d["seek_curve"]]
        d["rate_curve"] = [tuple(x) for x in d["rate_curve"]]
        return cls(**d)

    @property
    def gap_merge_bytes(self) -> int:
        """Competitive prefetch depth: what transfers during one average switch (C_switch x R_tr)."""
        return int(self.c_switch_s * self.r_tr_Bps)

    # -- curves ----------------------------------------------------------------------------
    def _arrays(self):
        import numpy as np
        if not hasattr(self, "_cache"):
            sd = np.array([max(1.0, d) for d, _ in self.seek_curve], dtype=float)
            st = np.array([t for _, t in self.seek_curve], dtype=float)
            ro = np.array([o for o, _ in self.rate_curve], dtype=float)
            rr = np.array([r for _, r in self.rate_curve], dtype=float)
            object.__setattr__(self, "_cache", (np.log(sd), st, ro, rr))
        return self._cache

    def seek_s(self, distance):
        """Switch time (seek + average rotation) for a distance in bytes (scalar or array)."""
        import numpy as np
        lsd, st, _, _ = self._arrays()
        return np.interp(np.log(np.maximum(1.0, np.abs(distance))), lsd, st)

    def rate(self, offset):
        import numpy as np
        _, _, ro, rr = self._arrays()
        return np.interp(offset, ro, rr)

    # -- DISK_ACCESS -----------------------------------------------------------------------
    def access_time_arrays(self, dev: np.ndarray, start: np.ndarray, length: np.ndarray) -> float:
        """Seconds to read ranges (byte start, byte length on device dev) in this order, QD 1."""
        import numpy as np
        n = len(start)
        if n == 0:
            return 0.0
        start = start.astype(float)
        length = length.astype(float)
        transfer = length / self.rate(start)
        prev_end = np.empty(n)
        prev_end[0] = 0
        prev_end[1:] = start[:-1] + length[:-1]
        gap = start - prev_end
        same_dev = np.ones(n, dtype=bool)
        same_dev[0] = False
        same_dev[1:] = dev[1:] == dev[:-1]
        switch = self.seek_s(gap)
        fwd = (gap > 0) & (gap <= self.stream_bytes)
        switch = np.where(fwd, np.minimum(switch, gap / self.rate(prev_end)), switch)
        switch = np.where(gap == 0, 0.0, switch)
        switch = np.where(same_dev, switch, self.c_switch_s)
        over = np.where(same_dev & (gap == 0), 0.0, self.overhead_s)
        return float(np.sum(transfer + switch + over))

    def access_time(self, ranges: Sequence[Tuple[int, int, int]]) -> float:
        """Seconds to read [(dev, byte start, byte length), ...] in the given order."""
        import numpy as np
        if not ranges:
            return 0.0
        a = np.array(ranges, dtype=np.int64)
        return self.access_time_arrays(a[:, 0], a[:, 1], a[:, 2])


def mean_random_switch(profile_curve: Sequence[Tuple[float, float]], span: float) -> float:
    """Average switch time between two uniformly random points of a span (density 2(s-x)/s^2)."""
    import numpy as np
    xs = (np.arange(2000) + 0.5) / 2000 * span
    lsd = np.log([max(1.0, d) for d, _ in profile_curve])
    st = np.array([t for _, t in profile_curve])
    t = np.interp(np.log(np.maximum(1.0, xs)), lsd, st)
    return float(np.sum(t * 2 * (span - xs) / span ** 2 * (span / 2000)))
