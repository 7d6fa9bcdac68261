"""A small 7200 rpm disk model for the dry-run's before/after estimate and remapped schedules.

Same parameters as the emulated disk (scripts/hddsim/hdd_model.c): 130 MB/s media rate, seeks
from 1 ms (next track) to 16 ms (full stroke) on a square-root curve, half a revolution of
rotational delay per seek. Launch time follows the paper's pipeline: segment 1 is fetched
before the app runs, segment i+1 while the app computes segment i.
"""

import math
from dataclasses import dataclass
from typing import Callable, Iterable, List, Sequence, Tuple

from ..devices import sysfs_path

RATE_BPS = 130e6
TRACK_SEEK_S = 1.0e-3
FULL_SEEK_S = 16.0e-3
HALF_REV_S = 0.5 * 60 / 7200


@dataclass
class FetchCost:
    seconds: float
    requests: int
    seeks: int


def fetch_cost(runs: Iterable[Tuple[int, int]], stroke_sectors: int) -> FetchCost:
    """Cost of fetching (sector, nr_sectors) runs in LBA order; touching runs form one request."""
    t, requests, seeks, pos = 0.0, 0, 0, None
    for start, n in sorted(runs):
        end = start + n
        if pos is not None and start <= pos:
            if end > pos:
                t += (end - pos) * 512 / RATE_BPS
                pos = end
            continue
        requests += 1
        if pos is None or start != pos:
            dist = abs(start - (pos or 0)) / max(stroke_sectors, 1)
            t += TRACK_SEEK_S + (FULL_SEEK_S - TRACK_SEEK_S) * math.sqrt(min(dist, 1.0)) + HALF_REV_S
            seeks += 1
        t += n * 512 / RATE_BPS
        pos = end
    return FetchCost(t, requests, seeks)


def launch_time(segments: Sequence[Tuple[float, float]]) -> float:
    """(fetch_s, cpu_s) per segment -> modelled launch time: f1 + sum max(cpu_{i-1}, f_i) + cpu_m."""
    if not segments:
        return 0.0
    t = segments[0][0]
    for (_, cpu_prev), (fetch, _) in zip(segments, segments[1:]):
        t += max(cpu_prev, fetch)
    return t + segments[-1][1]


@dataclass
class ScheduleCost:
    launch_s: float
    fetch_s: float
    requests: int
    seeks: int
    per_segment: List[FetchCost]

    def as_dict(self) -> dict:
        return {"launch_s": round(self.launch_s, 4), "fetch_s": round(self.fetch_s, 4),
                "requests": self.requests, "seeks": self.seeks, "segments": len(self.per_segment)}


def schedule_cost(sched, locate: Callable, stroke_sectors: int) -> ScheduleCost:
    """Model a schedule whose ranges are placed by locate(range) -> [(sector, nr_sectors), ...]."""
    per = []
    for seg in sched.segments:
        runs = [run for r in seg.ranges for run in locate(r)]
        per.append(fetch_cost(runs, stroke_sectors))
    launch = launch_time([(c.seconds, seg.cpu_s) for c, seg in zip(per, sched.segments)])
    return ScheduleCost(launch, sum(c.seconds for c in per), sum(c.requests for c in per),
                        sum(c.seeks for c in per), per)


def device_sectors(dev: int) -> int:
    """Size of block device `dev` in sectors (the seek stroke), 0 if unknown."""
    try:
        with open(sysfs_path(dev) + "/size") as f:
            return int(f.read())
    except (OSError, ValueError):
        return 0


def partition_start(dev: int) -> int:
    """First sector of partition `dev` on its disk (0 for a whole disk or a loop device)."""
    try:
        with open(sysfs_path(dev) + "/start") as f:
            return int(f.read())
    except (OSError, ValueError):
        return 0
