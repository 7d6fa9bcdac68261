"""The launch sequence P = (p1..pn) of the paper, built from one or several recordings.

p_i = (dev, LBA, size, c_i). Writes are dropped (a prefetcher reads), re-reads of blocks already
fetched in the launch are dropped (they were in the cache at replay time), the order is the first
access, and requests that continue the previous one on the disk are merged.

c_i, following Algorithm 1, is the CPU time the app spends *after* p_i arrives and before it needs
the next block. It is placed from the recorder's busy_union_after_ns (placed_cpu): the wall-clock time
with some task of the launch on a CPU (all threads, their union) between the issue of p_i and
the issue of p_(i+1) goes to p_i; what runs after the last issue is c_n. No CPU is lost: CPU
that ran while a read was outstanding (another thread, or the app computing under an async
readahead) is placed where it ran, after the reads issued before it. Recordings older than
busy_union_after_ns fall back to cpu_before_ns (CPU since the previous request completed, only while
none was outstanding): c_i = cpu_before(p_{i+1}), c_n = cpu_total - sum, so the CPU that
overlapped a request lands at the end of the launch, where it can hide no fetch. Either way the
CPU before the first request is folded into c_1 (it also runs only once the pre-buffer is in).

busy_after_ns of p_i (for the lower bound, analyzer/bound.py) is the CPU that must follow p_i's
data (recorder/cputime.assign_busy). Where accesses merge, the merged one keeps the smallest
(a later read's): a cut after both reads, which only lowers the bound.

Several recordings merge at 4 KiB block granularity: a block is kept when at least K of the N
recordings read it, ordered by the median of its normalised first-access position; the CPU time a
recording attributes to a request is spread over its blocks and averaged over the N recordings.
"""

import bisect
import statistics
from dataclasses import dataclass, field
from typing import Dict, Iterable, List, Optional, Sequence, Tuple

from ..model import BlockRequest

BLOCK_SECTORS = 8  # 4 KiB: the merge granularity, the page size


@dataclass
class Access:
    """p_i: a read of nr_sectors at sector of dev, then cpu_ns of CPU before the next one."""
    dev: int
    sector: int
    nr_sectors: int
    cpu_ns: int
    is_meta: bool = False
    busy_after_ns: Optional[int] = None

    @property
    def end(self) -> int:
        return self.sector + self.nr_sectors


@dataclass
class Coverage:
    recording_id: int
    read_bytes: int
    covered_bytes: int

    @property
    def fraction(self) -> float:
        return self.covered_bytes / self.read_bytes if self.read_bytes else 1.0


@dataclass
class LaunchSequence:
    accesses: List[Access]
    recording_ids: List[int]
    coverage: List[Coverage] = field(default_factory=list)
    dropped_writes: int = 0
    dropped_rereads: int = 0
    cpu_placement: str = "busy"   # how c_i was placed: "busy" (placed_cpu) or "cpu_before" (older recordings)

    @property
    def total_bytes(self) -> int:
        return sum(a.nr_sectors for a in self.accesses) * 512

    @property
    def cpu_ns(self) -> int:
        return sum(a.cpu_ns for a in self.accesses)


class _Seen:
    """Sector intervals already fetched, per device: subtract() returns the parts not yet seen."""

    def __init__(self):
        self._by_dev: Dict[int, List[Tuple[int, int]]] = {}

    def subtract(self, dev: int, start: int, end: int) -> List[Tuple[int, int]]:
        out, cur = [], start
        for s, e in self._by_dev.get(dev, ()):
            if e <= cur or s >= end:
                continue
            if s > cur:
                out.append((cur, s))
            cur = max(cur, e)
            if cur >= end:
                break
        if cur < end:
            out.append((cur, end))
        return out

    def add(self, dev: int, start: int, end: int) -> None:
        ivs = self._by_dev.setdefault(dev, [])
        ivs.append((start, end))
        ivs.sort()
        merged: List[Tuple[int, int]] = []
        for s, e in ivs:
            if merged and s <= merged[-1][1]:
                merged[-1] = (merged[-1][0], max(merged[-1][1], e))
            else:
                merged.append((s, e))
        self._by_dev[dev] = merged


def placed_cpu(requests: Sequence[BlockRequest]) -> Optional[Tuple[List[int], int]]:
    """(CPU before each request, CPU after the last read's issue) in ns, from the recorder's
    busy_union_after_ns (the launch's busy time, all threads, after a read's data arrived), issue_ns and
    complete_ns; None if a read lacks busy_union_after_ns (a recording older than it).

    CPU is placed by when it ran against the reads' *issues*: CPU that ran after p_i was issued and
    before p_(i+1) was goes after p_i (c_i). It cannot need p_(i+1) or later (not yet asked for),
    so the model never runs CPU before data it may need; at worst it is placed one read late (CPU
    under an outstanding read). R_i, the busy time left at p_i's issue, is not recorded; it lies
    between L_i = the largest busy_union_after_ns of a read completing after that issue and U_i = the
    smallest of a read completing before it. U_i minus the CPU since the last completion
    (cpu_before_ns, exact with one thread on CPU) is taken, kept within [L_i, U_i]. Placing CPU by
    completions instead (the smallest busy_union_after_ns so far) put CPU that waited for a slow read
    (a readahead outstanding 1.6 s in a recording of pycompile) before the reads issued meanwhile,
    as if it needed none of them: the pre-buffer seemed to feed 0.19 s of CPU, the launch found
    it needed the next segment. Writes get 0."""
    reads = [r for r in requests if not r.is_write]
    if not reads or any(r.busy_union_after_ns is None for r in reads):
        return None
    total = max(max(r.busy_union_after_ns for r in reads), reads[0].cpu_before_ns + reads[0].busy_union_after_ns)
    done = sorted((r.complete_ns if r.complete_ns is not None else r.issue_ns, r.busy_union_after_ns) for r in reads)
    # smallest busy_after of the reads completed by time t: a prefix minimum over done
    prefix_min, m = [], total
    for _, busy in done:
        m = min(m, busy)
        prefix_min.append(m)
    # largest busy_after of the reads completing at or after t: a suffix maximum over done
    suffix_max = [0] * (len(done) + 1)
    for k in range(len(done) - 1, -1, -1):
        suffix_max[k] = max(suffix_max[k + 1], done[k][1])
    times = [t for t, _ in done]
    out: List[int] = []
    left = total
    prev_done = None
    for r in requests:
        if r.is_write:
            out.append(0)
            continue
        since, prev_done = prev_done, r.complete_ns
        k = bisect.bisect_right(times, r.issue_ns)      # reads done[:k] completed by this issue
        upper = prefix_min[k - 1] if k else total
        lower = suffix_max[bisect.bisect_left(times, r.issue_ns)]
        # cpu_before_ns runs from the previous read's completion (recorder/cputime.py): it comes
        # off the busy time left at the last read completion only if that completion was not later
        ran = r.cpu_before_ns if since is not None and (not k or since >= times[k - 1]) else 0
        here = min(left, max(lower, upper - max(0, ran)))
        out.append(left - here)
        left = here
    return out, left


def from_requests(requests: Sequence[BlockRequest], tail_cpu_ns: int = 0, merge: bool = True,
                  cpu_total_ns: Optional[int] = None) -> LaunchSequence:
    """P of one recording. CPU placed by placed_cpu when the recording has busy times; else from
    cpu_before_ns, with tail_cpu_ns (or cpu_total_ns - their sum, if given) after the last request."""
    placed = placed_cpu(requests)
    if placed is not None:
        before, tail_cpu_ns = placed
    else:
        before = [r.cpu_before_ns for r in requests]
        if cpu_total_ns is not None:
            tail_cpu_ns = cpu_total_ns - sum(before)
    seen = _Seen()
    out: List[Access] = []
    pending_cpu = 0  # CPU before the next kept access, from dropped requests too
    writes = rereads = 0
    for r, cpu in zip(requests, before):
        pending_cpu += cpu
        if r.is_write:
            writes += 1
            continue
        parts = seen.subtract(r.dev, r.sector, r.sector + r.nr_sectors)
        if not parts:
            rereads += 1
            continue
        seen.add(r.dev, r.sector, r.sector + r.nr_sectors)
        for i, (s, e) in enumerate(parts):
            # The CPU before this request belongs to the previous access (c_{i-1}); before p1, to p1.
            if out:
                out[-1].cpu_ns += pending_cpu
                pending_cpu = 0
            out.append(Access(r.dev, s, e - s, pending_cpu, r.is_meta, r.busy_after_ns))
            pending_cpu = 0
    if out:
        out[-1].cpu_ns += pending_cpu + max(0, tail_cpu_ns)
    seq = LaunchSequence(merge_adjacent(out) if merge else out, [], dropped_writes=writes, dropped_rereads=rereads,
                         cpu_placement="busy" if placed is not None else "cpu_before")
    return seq


def merge_adjacent(accesses: Iterable[Access]) -> List[Access]:
    """Merge p_{i+1} into p_i when it starts where p_i ends on the same device (and kind)."""
    out: List[Access] = []
    for a in accesses:
        if out and out[-1].dev == a.dev and out[-1].end == a.sector and out[-1].is_meta == a.is_meta:
            out[-1].nr_sectors += a.nr_sectors
            out[-1].cpu_ns += a.cpu_ns
            out[-1].busy_after_ns = min_busy(out[-1].busy_after_ns, a.busy_after_ns)
        else:
            out.append(Access(a.dev, a.sector, a.nr_sectors, a.cpu_ns, a.is_meta, a.busy_after_ns))
    return out


def min_busy(a: Optional[int], b: Optional[int]) -> Optional[int]:
    """The busy time of two merged accesses: the smaller; unknown if either is."""
    return None if a is None or b is None else min(a, b)


def _blocks(a: Access):
    first = a.sector // BLOCK_SECTORS
    last = (a.end - 1) // BLOCK_SECTORS
    return range(first, last + 1)


def merge_recordings(seqs: Sequence[Tuple[int, LaunchSequence]], k: int) -> LaunchSequence:
    """Merge the P of N recordings: blocks read by >= k of them, by median first-access position."""
    n = len(seqs)
    if n == 0:
        raise ValueError("no recordings to merge")
    if n == 1:
        rid, s = seqs[0]
        s.recording_ids = [rid]
        s.coverage = [Coverage(rid, s.total_bytes, s.total_bytes)]
        return s
    k = max(1, min(k, n))
    pos: Dict[Tuple[int, int], List[float]] = {}
    cpu: Dict[Tuple[int, int], float] = {}
    meta: Dict[Tuple[int, int], bool] = {}
    busy: Dict[Tuple[int, int], Optional[int]] = {}
    for _, s in seqs:
        nblocks = sum(len(_blocks(a)) for a in s.accesses) or 1
        i = 0
        mine = set()  # a 4 KiB block can be shared by two unaligned accesses: first one counts
        for a in s.accesses:
            blocks = _blocks(a)
            for b in blocks:
                key = (a.dev, b)
                if key not in mine:
                    mine.add(key)
                    pos.setdefault(key, []).append(i / nblocks)
                cpu[key] = cpu.get(key, 0.0) + a.cpu_ns / len(blocks) / n
                meta[key] = meta.get(key, False) or a.is_meta
                busy[key] = min_busy(busy.get(key, a.busy_after_ns), a.busy_after_ns)
                i += 1
    kept = sorted((statistics.median(p), key) for key, p in pos.items() if len(p) >= k)
    keptset = {key for _, key in kept}
    accesses = [Access(dev, b * BLOCK_SECTORS, BLOCK_SECTORS, int(round(cpu[(dev, b)])), meta[(dev, b)],
                       busy[(dev, b)]) for _, (dev, b) in kept]
    coverage = []
    for rid, s in seqs:
        read = covered = 0
        for a in s.accesses:
            for b in _blocks(a):
                read += 4096
                covered += 4096 if (a.dev, b) in keptset else 0
        coverage.append(Coverage(rid, read, covered))
    placements = {s.cpu_placement for _, s in seqs}
    return LaunchSequence(merge_adjacent(accesses), [rid for rid, _ in seqs], coverage,
                          sum(s.dropped_writes for _, s in seqs), sum(s.dropped_rereads for _, s in seqs),
                          placements.pop() if len(placements) == 1 else "mixed")
