"""The launch's lower bound: no prefetcher can make it finish sooner (definition: docs/algorithms.md).

For every cut k over the launch's reads in first-access order (p_1..p_n):
    cut_k = D(p_1..p_k) + s * B_k
where D(X) is one LBA-sorted pass over exactly the blocks of X the schedule reads, and on XFS and
btrfs the launch's reads of their metadata among X (timed on the disk's profile floored by
floor_profile), B_k the CPU that must follow the data of p_1..p_k (the
smallest of the recorder's block_requests.busy_after_ns over p_1..p_k: reads complete out of
order, and merged recordings order blocks by median position; recorder/cputime.assign_busy), and s the
prefetched launch's CPU / the traced launch's (the analyzer's cpu_scale, <= 1). The bound is
    LB = max( max_k cut_k,  warm launch time,  one sorted O_DIRECT pass of the schedule's reads )
with each cut counting at most D(p_1..p_k) + the warm launch time (launch_bound), and, for one
launch, at the CPU speed that launch ran at (launch_bound_at_cpu).
The cut part comes from the recording and the disk model and is stored with the schedule
(params["bound"]); the two others are measured by the bench (warm launches, its schedule pass)
and combined here by launch_bound, the one place that does.
"""

from dataclasses import asdict, dataclass
from typing import List, Optional, Sequence, Tuple

# At most this many cuts are timed (evenly spaced, the last read always among them): every cut is a
# lower bound by itself, so timing fewer only makes the maximum smaller, never wrong.
MAX_CUTS = 400

Run = Tuple[int, int, int]   # (dev, byte start, byte length)


@dataclass
class CutBound:
    """max over k of D(p_1..p_k) + s * B_k, and the cut that gave it."""
    seconds: float
    k: int                     # 1-based: the cut after p_k (0: no read had a busy time)
    fetch_s: float             # D(p_1..p_k)
    cpu_s: float               # s * B_k
    reads: int                 # n
    cpu_scale: float
    busy_known: bool           # False: the recording predates busy_after_ns (CPU half left out)
    timed: bool                # False: no disk profile, the fetch half is 0

    def to_json(self) -> dict:
        return {k: (round(v, 6) if isinstance(v, float) else v) for k, v in asdict(self).items()}


def sorted_pass(runs: Sequence[Run], access_time) -> float:
    """One LBA-sorted pass over runs (overlapping or touching runs read once): access_time's time."""
    merged: List[List[int]] = []
    for dev, start, length in sorted(runs):
        if merged and merged[-1][0] == dev and start <= merged[-1][1] + merged[-1][2]:
            m = merged[-1]
            m[2] = max(m[1] + m[2], start + length) - m[1]
        else:
            merged.append([dev, start, length])
    return access_time([tuple(m) for m in merged]) if merged else 0.0


def cut_bound(reads: Sequence[Sequence[Run]], busy_after_s: Sequence[Optional[float]], cpu_scale: float,
              access_time=None) -> CutBound:
    """reads[i]: the runs of p_{i+1} the schedule fetches; busy_after_s[i]: B of p_{i+1} (None:
    unknown); access_time(runs) -> seconds, or None when there is no disk model."""
    n = len(reads)
    known = [b is not None for b in busy_after_s]
    scale = min(1.0, max(0.0, cpu_scale))
    best = CutBound(0.0, 0, 0.0, 0.0, n, scale, any(known), access_time is not None)
    if n == 0:
        return best
    step = max(1, -(-n // MAX_CUTS))
    cuts = sorted(set(range(step - 1, n, step)) | {n - 1})
    mins: List[Optional[float]] = []   # the smallest B over p_1..p_k (None once one is unknown)
    b: Optional[float] = float("inf")
    for x in busy_after_s:
        b = None if b is None or x is None else min(b, x)
        mins.append(b)
    cpu = {k: scale * mins[k] if mins[k] is not None else 0.0 for k in cuts}
    if access_time is None:
        if not best.busy_known:
            return best
        k = max(cuts, key=lambda k: cpu[k])
        return CutBound(cpu[k], k + 1, 0.0, cpu[k], n, scale, True, False)

    def fetch(k: int) -> float:
        return sorted_pass([r for runs in reads[:k + 1] for r in runs], access_time)

    # D grows with k (floor_profile) and the CPU half shrinks: the whole pass plus a cut's CPU is
    # an upper limit of that cut, so cuts are timed from the most CPU down until none can win
    full = fetch(n - 1)
    best = CutBound(full + cpu[n - 1], n, full, cpu[n - 1], n, scale, best.busy_known, True)
    for k in sorted(cuts, key=lambda k: -cpu[k]):
        if full + cpu[k] <= best.seconds:
            break
        d = fetch(k)
        if d + cpu[k] > best.seconds:
            best = CutBound(d + cpu[k], k + 1, d, cpu[k], n, scale, best.busy_known, True)
    return best


def launch_bound(cut_s: Optional[float], warm_s: Optional[float], schedule_pass_s: Optional[float],
                 cut_fetch_s: Optional[float] = None) -> Optional[float]:
    """LB = max(cut bound, warm launch, sorted pass of the schedule's reads): None if none is known.
    With the cut's fetch half and a warm launch known, the cut counts at most that warm launch
    after its fetch: its CPU half is work the launch does after a read, which run warm is part
    of a warm launch. The CPU half comes from one recording's CPU and the CPU ratio of one warm
    run (cpu_scale); measured high, it put perlpod's cut on the emulated SSD at 0.336 s, above
    its prefetched launches (0.322-0.331 s) and warm ones (0.307-0.312 s)."""
    if cut_s is not None and warm_s is not None and cut_fetch_s is not None:
        cut_s = min(cut_s, cut_fetch_s + warm_s)
    known = [x for x in (cut_s, warm_s, schedule_pass_s) if x is not None]
    return max(known) if known else None


def launch_bound_at_cpu(cpu_s: Optional[float], warm_cpu_s: Optional[float], cut_s: Optional[float],
                        warm_s: Optional[float], schedule_pass_s: Optional[float],
                        cut_fetch_s: Optional[float]) -> Optional[float]:
    """LB of one launch at the CPU speed it ran at: its CPU halves (the cut's CPU half, the warm
    launch) scaled by f = cpu_s / warm_cpu_s, the launch's own CPU time (user + system, wait4)
    over that of the warm launch LB took; the disk halves unscaled. A host's CPU can change speed
    during a bench run (perlpod's warm launches took 0.65 s and 1.49 s of CPU in one run): LB
    built from the fastest warm launch then holds but is loose for a launch made in a slow spell.
    None without both CPU times, or without a warm launch."""
    if not cpu_s or not warm_cpu_s or warm_s is None:
        return None
    f = cpu_s / warm_cpu_s
    # without its fetch half, which part of a cut to scale is not known: the cut is left out
    cut_s = cut_fetch_s + (cut_s - cut_fetch_s) * f if cut_s is not None and cut_fetch_s is not None else None
    return launch_bound(cut_s, warm_s * f, schedule_pass_s, cut_fetch_s)


def schedule_runs(sched, dev: Optional[int] = None) -> List[Run]:
    """The byte runs a schedule reads (of one device if dev is given), for its sorted pass."""
    return [(r.dev, r.sector * 512, r.nr_sectors * 512) for s in sched.segments for r in s.ranges
            if dev is None or r.dev == dev]


def floor_profile(prof):
    """The profile the bound's passes are timed on: prof with every switch capped at its average
    C_switch and no per-request overhead. The model charges a fetch that starts a segment (head
    position unknown) C_switch and a move inside a pass seek(distance), which can be more; and it
    charges a request's overhead, so reading through a hole (one request) can cost less than
    skipping it (two). With both floors one sorted pass never costs more than any schedule of
    the same or more blocks, however it is cut into segments (tests/test_bound.py). And the
    floor starts from the profile as the replayer fetches, many requests in flight
    (DiskProfile.in_flight: the profile itself on an HDD), and every place transfers at the
    fastest rate measured: the rate curve's places are timed one 3 MiB run each, ±5 % apart on an
    SSD whose places are all alike."""
    import dataclasses
    fetch = prof.in_flight()
    peak = max([r for _, r in fetch.rate_curve] + [fetch.r_tr_Bps])
    return dataclasses.replace(fetch, seek_curve=[(d, min(t, fetch.c_switch_s)) for d, t in fetch.seek_curve],
                               overhead_s=0.0, rate_curve=[(o, peak) for o, _ in fetch.rate_curve], r_tr_Bps=peak)


def of_analysis(items, busy_after_ns: Sequence[Optional[int]], cpu_scale: float, prof, dev: int,
                fs_meta=None) -> CutBound:
    """The cut bound of an analysis: items[i] the pieces the schedule fetches for p_{i+1} (after
    file metadata was added), busy_after_ns[i] its B; timed on prof (the DiskProfile of dev, or
    None), counting only dev's pieces (the others are not timed: the pass only gets shorter).
    fs_meta[i]: the launch's reads of XFS/btrfs metadata up to p_{i+1} [(dev, sector, sectors)],
    which no prefetch spares the disk (the replayer's metadata step reads them through the file
    system) and so count in D like the schedule's own blocks."""
    reads = [[(p.dev, p.sector * 512, p.nr_sectors * 512) for p in ps if p.dev == dev] for ps in items]
    for runs, extra in zip(reads, fs_meta or ()):
        runs += [(d, s * 512, n * 512) for d, s, n in extra if d == dev]
    busy = [None if b is None else b / 1e9 for b in busy_after_ns]
    return cut_bound(reads, busy, cpu_scale, floor_profile(prof).access_time if prof is not None else None)


def of_schedule(conn, sched, warm_s: Optional[float] = None) -> dict:
    """The bound of a stored schedule as far as the database knows it: its cut bound (stored by
    analyze; None for schedules from before it), its reads' sorted pass modelled on the profile
    the schedule was modelled with (else its device's), and warm_s if the caller has a warm
    launch time. For `show`."""
    from ..db.profiles import profile_by_id
    from .access import schedule_profile
    cut = (sched.params or {}).get("bound") or {}
    prof = profile_by_id(conn, sched.profile_id) if sched.profile_id else None
    how = f"profile {sched.profile_id}, the schedule's own"
    if prof is None:   # the profile the schedule was modelled with, else its device's now
        _, prof, how = schedule_profile(conn, sched)
    dev = max({r.dev for s in sched.segments for r in s.ranges},
              key=lambda d: sum(r.nr_sectors for s in sched.segments for r in s.ranges if r.dev == d), default=None)
    pass_s = sorted_pass(schedule_runs(sched, dev), floor_profile(prof).access_time) if dev is not None else None
    return {"bound_s": launch_bound(cut.get("seconds"), warm_s, pass_s), "cut": cut or None,
            "schedule_pass_s": pass_s, "schedule_pass_modelled": how, "warm_s": warm_s}
