"""DISK_ACCESS implementations behind one interface (segment.Cost): the model and the real disk.

- ModelCost: the device profile's estimate (DiskProfile, model.py), no I/O; thousands of calls per second.
- schedule_cost: the same profile's estimate of a stored schedule (import and relocation re-model
  schedules whose ranges moved, or are predicted to move, with it).
- DiskCost: reads the segment's ranges in fetch order from the block device with O_DIRECT through
  warmstart-probe, so the device is timed and not the page cache. Before each probe the head is put
  at a fixed place (a 4 KiB read at offset 0, not counted) so repeated probes start alike. A time
  budget bounds the total probing; once spent, the search stops asking for new measurements.
"""

import time
from dataclasses import dataclass
from typing import Callable, Dict, List, Optional, Sequence, Tuple

from ..model import DiskProfile, Range, Schedule
from .ordering import PieceTable, fetch_order
from .profile import main_dev, model_profile
from ..errors import WarmstartError
from .probe import check_direct, device_path, run
from .segment import Cost, segments_launch_time


def _merge_contiguous(starts, lengths) -> List[Tuple[int, int]]:
    out: List[Tuple[int, int]] = []
    for s, n in zip(starts.tolist(), lengths.tolist()):
        if out and out[-1][0] + out[-1][1] == s:
            out[-1] = (out[-1][0], out[-1][1] + n)
        else:
            out.append((s, n))
    return out


class ModelCost(Cost):
    """DISK_ACCESS of the profile as the replayer fetches: many requests in flight."""

    def __init__(self, table: PieceTable, profile: DiskProfile):
        super().__init__()
        self.table, self.profile = table, profile.in_flight()

    def measure(self, a: int, b: int) -> float:
        dev, start, length = self.table.arrays(a, b)
        return self.profile.access_time_arrays(dev, start, length)


def calibration(pairs: Sequence[Tuple[float, float]]) -> Tuple[float, float]:
    """(alpha, beta) of the least-squares fit disk ~ alpha * model + beta over (model, disk) seconds
    of the same segments, both >= 0: alpha corrects the model's scale, beta what every segment
    costs beyond it (a sweep's start, the seeks the model underrates in a scattered segment)."""
    pts = [(m, d) for m, d in pairs if m >= 0 and d >= 0]
    if not pts:
        return 1.0, 0.0
    n = len(pts)
    sm = sum(m for m, _ in pts)
    sd = sum(d for _, d in pts)
    smm = sum(m * m for m, _ in pts)
    smd = sum(m * d for m, d in pts)
    det = n * smm - sm * sm
    if n >= 2 and det > 1e-12 * max(1.0, n * smm):
        alpha = (n * smd - sm * sd) / det
        beta = (sd - alpha * sm) / n
        if alpha > 0 and beta >= 0:
            return alpha, beta
    if smm > 0:
        alpha = smd / smm                  # through the origin
        if alpha > 0:
            return alpha, 0.0
    return 1.0, max(0.0, (sd - sm) / n)


class CalibratedCost(Cost):
    """A cost corrected by the disk's own answers: alpha * base(a, b) + beta (calibration)."""

    def __init__(self, base: Cost, alpha: float, beta: float):
        super().__init__()
        self.base, self.alpha, self.beta = base, alpha, beta

    def measure(self, a: int, b: int) -> float:
        return self.alpha * self.base(a, b) + self.beta


class WithSteps(Cost):
    """A segment's time in the launch where the replayer warms metadata through the file system
    (XFS, btrfs): base's DISK_ACCESS of its data, and before it the metadata step's share of the
    segment, what its accesses need, one read at a time: the reads of p_a..p_b (meta_reads[i]:
    p_i's, analyze.map_sequence) timed as metadata_step times a segment's share (merged where they
    touch, each run an average switch), so a segment's t_i holds the share the schedule stores."""

    def __init__(self, base: Cost, meta_reads: Sequence[Sequence[Sequence[int]]],
                 profile_of: Callable[[int], Optional[DiskProfile]]):
        super().__init__()
        import numpy as np
        self.base = base
        flat = sorted((int(d), int(s), int(n), i) for i, rs in enumerate(meta_reads) for d, s, n in rs)
        self.devs = {}
        for dev in sorted({r[0] for r in flat}):
            prof = profile_of(dev)
            if prof is None:       # not timed, as metadata_step leaves it
                continue
            rows = np.array([r[1:] for r in flat if r[0] == dev], dtype=np.int64).reshape(-1, 3)
            self.devs[dev] = (prof, rows[:, 0], rows[:, 0] + rows[:, 1], rows[:, 2])

    def step(self, a: int, b: int) -> float:
        """metadata_step(reads of p_a..p_b)["t_s"]: the same runs (_runs), the reads picked from
        arrays sorted once."""
        t = 0.0
        for dev, (prof, start, end, item) in self.devs.items():
            sel = (item >= a) & (item <= b)
            if sel.any():
                t += prof.scattered_time(_runs(dev, start[sel], end[sel]))
        return t

    def measure(self, a: int, b: int) -> float:
        return self.base(a, b) + self.step(a, b)

    def exhausted(self) -> bool:
        return self.base.exhausted()


@dataclass
class ScheduleCost:
    """A stored schedule on a device profile: its launch time T (segment.pipelined), the fetch
    time of each segment, the requests (runs that do not touch the previous one) and the seeks
    among them (gaps the drive does not stream through)."""
    launch_s: float
    per_segment: List[float]
    requests: int
    seeks: int

    @property
    def fetch_s(self) -> float:
        return sum(self.per_segment)

    def as_dict(self) -> dict:
        return {"launch_s": round(self.launch_s, 4), "fetch_s": round(self.fetch_s, 4),
                "requests": self.requests, "seeks": self.seeks, "segments": len(self.per_segment)}


Locate = Callable[[Range], Optional[Sequence[Tuple[int, int]]]]


def schedule_cost(sched: Schedule, profile: DiskProfile, locate: Optional[Locate] = None) -> ScheduleCost:
    """Model sched on profile (ModelCost's DISK_ACCESS, segment.pipelined's T). locate(range) ->
    [(sector, nr_sectors), ...] says where a range's bytes are (where the schedule says without
    locate, or where it returns None); each segment is fetched in the schedule's fetch order of
    those places."""
    per, requests, seeks = [], 0, 0
    fetch = profile.in_flight()
    metadata_first = sched.params.get("metadata_first", True)
    for seg in sched.segments:
        placed = [Range(r.dev, run[0], run[1], run[1] * 512, r.file) for r in seg.ranges
                  for run in ((locate(r) if locate else None) or [(r.sector, r.nr_sectors)])]
        runs = [(r.dev, r.sector * 512, r.nr_sectors * 512) for r in fetch_order(placed, metadata_first)]
        per.append(fetch.access_time(runs))
        prev = None
        for dev, start, length in runs:
            gap = None if prev is None or prev[0] != dev else start - prev[1]
            if gap != 0:
                requests += 1
                seeks += gap is None or not 0 < gap <= profile.stream_bytes
            prev = (dev, start + length)
    launch = segments_launch_time(per, [seg.cpu_s for seg in sched.segments])
    return ScheduleCost(launch, per, requests, seeks)


def _runs(dev: int, start, end) -> List[Tuple[int, int, int]]:
    """Sector ranges [start, end) of one device, sorted by start, merged where they touch or
    overlap: [(dev, byte start, byte length), ...], as the step's reads are timed."""
    import numpy as np
    if not len(start):
        return []
    reach = np.maximum.accumulate(end)
    new = np.ones(len(start), dtype=bool)
    new[1:] = start[1:] > reach[:-1]          # a gap: another run
    first = np.flatnonzero(new)
    return [(dev, int(a) * 512, int(b - a) * 512) for a, b in zip(start[first], np.maximum.reduceat(end, first))]


def metadata_step(reads: Sequence[Sequence[int]], profile_of: Callable[[int], Optional[DiskProfile]],
                  by_segment: Optional[Sequence[Sequence[Sequence[int]]]] = None) -> dict:
    """The replayer's metadata step (XFS, btrfs: lookups and directory reads through the file
    system, one at a time; docs/replayer.md) as the schedule stores it: `reads`, the launch's own
    reads of that metadata [(block dev, sector, sectors)] each once in disk order
    (FileMap.fs_meta_reads), and `t_s`, their time on the profile of their device (profile_of(dev);
    None: not timed), each read an average switch (DiskProfile.scattered_time): the step goes in
    inode order, which is not these reads' disk order, and waits for each. by_segment: the reads
    of each segment's accesses; the replayer warms each segment's share before its data, so
    `segments` and `segments_s` give each share, and the segments' t_i and t_exp count them (the
    hold counts the first). Without it, the step is all before the first segment, outside its t_i
    (schedules analyzed before 2026-11-29)."""
    import numpy as np
    runs: List[List[int]] = []
    t = 0.0
    for dev in sorted({int(r[0]) for r in reads}):
        mine = np.array(sorted({(int(s), int(s) + int(n)) for d, s, n in reads if d == dev}), dtype=np.int64)
        merged = _runs(dev, mine[:, 0], mine[:, 1])
        runs += [[dev, b // 512, n // 512] for _, b, n in merged]
        prof = profile_of(dev)
        if prof is not None:
            t += prof.scattered_time(merged)
    out = {"reads": runs, "t_s": t}
    if by_segment is not None:
        parts = [metadata_step(r, profile_of) for r in by_segment]
        out["segments"] = [p["reads"] for p in parts]
        out["segments_s"] = [p["t_s"] for p in parts]
    return out


def schedule_profile(conn, sched: Schedule) -> Tuple[Optional[int], DiskProfile, str]:
    """(profile id or None, profile, where it came from) of the device sched is timed on."""
    return model_profile(conn, main_dev(conn, (r for s in sched.segments for r in s.ranges)))


def remodel(conn, sched: Schedule) -> str:
    """Set sched's t_i, metadata step and t_exp from its device's profile; returns what it was
    modelled with."""
    profile_id, prof, how = schedule_profile(conn, sched)
    cost = schedule_cost(sched, prof)
    per = cost.per_segment
    step = sched.params.get("metadata_step")
    if step:
        step = sched.params["metadata_step"] = metadata_step(step["reads"], lambda dev: model_profile(conn, dev)[1],
                                                             step.get("segments"))
        if sched.step_by_segment:
            per = [t + s for t, s in zip(per, step["segments_s"])]
    for seg, t in zip(sched.segments, per):
        seg.t_disk_s = t
    sched.t_exp_s = segments_launch_time(per, [seg.cpu_s for seg in sched.segments]) + sched.metadata_step_s
    sched.profile_id = profile_id
    return "modelled: " + how


class DiskCost(Cost):
    """Devices that cannot be read with O_DIRECT (another file system the launch touched, e.g. the
    root disk of a chroot) are costed by their profile in `fallback` if there is one (as fetched,
    DiskProfile.in_flight), else not at all; `unprobed` says which and why, and the analysis
    reports it."""

    def __init__(self, table: PieceTable, budget_s: Optional[float] = None,
                 paths: Optional[Dict[int, str]] = None, fallback: Optional[Dict[int, DiskProfile]] = None,
                 qd: int = 1):
        super().__init__()
        self.table, self.qd = table, qd
        self.paths = {d: p for d, p in (paths or {}).items() if p}
        self.fallback = {d: p.in_flight() for d, p in (fallback or {}).items()}
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
            if self.qd == 1:     # after a positioning read (not counted): where the head was is unknown
                r = run(path, [(0, 4096)] + _merge_contiguous(start[i:j], length[i:j]))
                total += r.elapsed_s - r.request_s[0]
            else:
                total += run(path, _merge_contiguous(start[i:j], length[i:j]), qd=self.qd).elapsed_s
            i = j
        self.probe_s += total
        return total
