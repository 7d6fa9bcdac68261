"""CPU-time attribution: the c_i of the launch-sequence paper (definition in docs/recording.md).

F(t) = on-CPU time of all the launch's tasks (summed over threads and CPUs) from the launch
start to t. For requests p_1..p_n in issue order:
    c_1 = F(issue_1) - F(start)
    c_i = F(issue_i) - F(complete_{i-1})   if p_{i-1} completed before p_i was issued, else 0
and the tail (CPU after the last completion up to the launch end) is F(end) - F(complete_n).
CPU spent while a request is outstanding overlaps that I/O already and belongs to no c_i.

B(t) = wall-clock time from the launch start to t during which at least one of the launch's tasks
was on a CPU (the union of the on-CPU intervals, not their sum: two threads running at once count
once). busy_after_ns of a request = B(end) - B(complete): the launch's busy time after the request's
data arrived, the CPU half of the lower bound (docs/algorithms.md, analyzer/bound.py).
"""

import bisect
from typing import List, Sequence, Tuple

from ..model import BlockRequest


class CpuCurve:
    """F(t) from on-CPU intervals; piecewise linear, slope = number of the launch's tasks running."""

    def __init__(self, intervals: Sequence[Tuple[int, int, int]]):
        deltas = {}
        for s, e, _ in intervals:
            deltas[s] = deltas.get(s, 0) + 1
            deltas[e] = deltas.get(e, 0) - 1
        self.times: List[int] = sorted(deltas)
        self.values: List[int] = []   # F at each breakpoint
        self.slopes: List[int] = []   # slope after each breakpoint
        f, slope, last = 0, 0, None
        for t in self.times:
            if last is not None:
                f += slope * (t - last)
            slope += deltas[t]
            self.values.append(f)
            self.slopes.append(slope)
            last = t

    def __call__(self, t: int) -> int:
        i = bisect.bisect_right(self.times, t) - 1
        if i < 0:
            return 0
        return self.values[i] + self.slopes[i] * (t - self.times[i])

    def between(self, a: int, b: int) -> int:
        return max(0, self(b) - self(a)) if b > a else 0


def busy_curve(intervals: Sequence[Tuple[int, int, int]]) -> CpuCurve:
    """B(t): the CpuCurve of the union of the intervals (slope 1 while any task runs)."""
    merged: List[Tuple[int, int, int]] = []
    for s, e, tid in sorted(intervals):
        if merged and s <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(merged[-1][1], e), 0)
        else:
            merged.append((s, e, 0))
    return CpuCurve(merged)


def assign_busy(requests: List[BlockRequest], busy: CpuCurve, end_ns: int) -> None:
    """Set busy_after_ns on the reads: B(end) - B(completion), or from the issue if unseen."""
    for req in requests:
        if not req.is_write:
            req.busy_after_ns = busy.between(req.complete_ns if req.complete_ns is not None else req.issue_ns, end_ns)


def assign_cpu(requests: List[BlockRequest], curve: CpuCurve, start_ns: int, end_ns: int) -> int:
    """Set cpu_before_ns (c_i) on requests (in issue order); return the tail CPU time."""
    since = start_ns
    for req in requests:
        if req.is_write:
            # writes (journal commits, writeback) are not in the launch sequence and the app does
            # not wait for them: they neither take CPU time nor end the window of the next read
            req.cpu_before_ns = 0
            continue
        req.cpu_before_ns = curve.between(since, req.issue_ns) if since is not None else 0
        done = req.complete_ns
        # the next window opens when this request completes; if that is after the next issue
        # (overlapping requests), the next window is empty
        since = done if done is not None else req.issue_ns
    return curve.between(since if since is not None else start_ns, end_ns)
