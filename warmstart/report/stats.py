"""The numbers every report and bench prints: medians, spreads, ratios, gains, the lower bound.

Pure functions on lists of floats, so the table, the JSON and the bench agree by construction.
None means "not measured" and propagates instead of turning into a misleading 0.
"""

import statistics
from dataclasses import asdict, dataclass
from typing import Iterable, Optional


@dataclass(frozen=True)
class Spread:
    """A sample of launch times: its size, median and min-max range (the paper's error bars)."""

    n: int
    median: float
    min: float
    max: float

    @property
    def rel_range(self) -> float:
        """(max - min) / median: how far apart the fastest and slowest launches were."""
        return (self.max - self.min) / self.median if self.median > 0 else 0.0

    def as_dict(self) -> dict:
        return dict(asdict(self), rel_range=self.rel_range)


def spread(values: Iterable[float]) -> Optional[Spread]:
    """Spread of the values, or None for an empty sample."""
    v = [float(x) for x in values]
    if not v:
        return None
    return Spread(n=len(v), median=statistics.median(v), min=min(v), max=max(v))


def median(values: Iterable[Optional[float]]) -> Optional[float]:
    """The median of the values that are not None (the mean of the middle two of an even count),
    None if there are none."""
    v = [x for x in values if x is not None]
    return statistics.median(v) if v else None


def ratio(a: Optional[float], b: Optional[float]) -> Optional[float]:
    """a / b, None when either is missing or b is not positive."""
    if a is None or b is None or b <= 0:
        return None
    return a / b


def gain(prefetched: Optional[float], cold: Optional[float]) -> Optional[float]:
    """1 - prefetched/cold: the share of the cold launch time the prefetcher removed."""
    r = ratio(prefetched, cold)
    return None if r is None else 1.0 - r


def captured(cold: Optional[float], prefetched: Optional[float], warm: Optional[float]) -> Optional[float]:
    """(cold - prefetched) / (cold - warm): the share of the removable time actually removed.

    Warm is the floor no prefetcher can beat (everything already cached); when cold is not
    slower than warm there is nothing to capture and the share is undefined."""
    if cold is None or prefetched is None or warm is None or cold - warm <= 0:
        return None
    return (cold - prefetched) / (cold - warm)


def warm_or_raw_pass(warm: Optional[float], sorted_read: Optional[float]) -> Optional[float]:
    """max(warm launch time, one LBA-sorted pass over the recording's raw requests): what older
    bench runs called LB. Not a lower bound (the raw requests hold unused readahead, and the app's
    CPU cannot run before its data); the bound is analyzer/bound.py's. Kept for comparisons."""
    known = [x for x in (warm, sorted_read) if x is not None]
    return max(known) if known else None


def estimate_error(measured: Optional[float], expected: Optional[float]) -> Optional[float]:
    """(measured - t_exp) / t_exp: positive when the launch was slower than Algorithm 1 predicted."""
    r = ratio(measured, expected)
    return None if r is None else r - 1.0


def share(part: Optional[float], whole: Optional[float]) -> Optional[float]:
    """part / whole for byte counts (accuracy, waste); None when whole is 0 or unknown."""
    return ratio(part, whole)
