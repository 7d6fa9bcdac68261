"""CPU-time attribution: the c_i of the launch-sequence paper (definition in docs/recording.md).

F(t) = on-CPU time of all the launch's tasks (summed over threads and CPUs) from the launch
start to t. For requests p_1..p_n in issue order:
    c_1 = F(issue_1) - F(start)
    c_i = F(issue_i) - F(complete_{i-1})   if p_{i-1} completed before p_i was issued, else 0
and the tail (CPU after the last completion up to the launch end) is F(end) - F(complete_n).
CPU spent while a request is outstanding overlaps that I/O already and belongs to no c_i.

busy_after_ns of a request: the CPU that must follow its data in any launch, the CPU half of the
lower bound (assign_busy; docs/algorithms.md, analyzer/bound.py). busy_union_after_ns: B(end) -
B(complete), B(t) the wall-clock time to t during which at least one of the launch's tasks was on
a CPU (the union of the on-CPU intervals: two threads at once count once); the segmentation places
the launch's CPU from it (analyzer/sequence.placed_cpu).
"""

import bisect
from typing import Dict, List, Sequence, Tuple

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
    for s, e, _ in sorted(intervals):
        if merged and s <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(merged[-1][1], e), 0)
        else:
            merged.append((s, e, 0))
    return CpuCurve(merged)


def assign_busy(requests: List[BlockRequest], intervals: Sequence[Tuple[int, int, int]],
                born: Dict[int, int], end_ns: int, ncpu: int) -> None:
    """Set busy_union_after_ns on the reads: B(end) - B(t), t the completion (or the issue if
    unseen), B the union of all the launch's tasks' on-CPU time (the segmentation places the CPU
    from it: analyzer/sequence.placed_cpu). And busy_after_ns: the CPU that
    must follow the read's data, whatever the machine's load or the order the scheduler chose.
    Only the tasks that depend on the data are counted: the one that issued the read (it waited
    for it) and the tasks created after it arrived. Their CPU after the completion cannot shrink
    below its longest single task's, nor below its sum over the CPUs (ncpu):
        busy_after = max(max over them, sum over them / ncpu)
    Other tasks' CPU (another process computing at once, a thread pool started before) is left
    out: it may not need this data, and a prefetched launch can run it earlier."""
    per_task: Dict[int, List[Tuple[int, int, int]]] = {}
    for iv in intervals:
        per_task.setdefault(iv[2], []).append(iv)
    curves = {tid: CpuCurve(ivs) for tid, ivs in per_task.items()}
    union = busy_curve(intervals)
    # tasks by birth; every task born after t runs all its CPU after t: suffix max and sum
    order = sorted((born.get(tid, 0), tid) for tid in curves)
    births = [b for b, _ in order]
    totals = [curves[tid](end_ns) for _, tid in order]
    suf_max, suf_sum = [0] * (len(order) + 1), [0] * (len(order) + 1)
    for i in range(len(order) - 1, -1, -1):
        suf_max[i] = max(suf_max[i + 1], totals[i])
        suf_sum[i] = suf_sum[i + 1] + totals[i]
    for req in requests:
        if req.is_write:
            continue
        t = req.complete_ns if req.complete_ns is not None else req.issue_ns
        i = bisect.bisect_left(births, t)           # born at or after t
        own = curves[req.tid].between(t, end_ns) if req.tid in curves else 0
        req.busy_after_ns = max(own, suf_max[i], (own + suf_sum[i]) // max(1, ncpu))
        req.busy_union_after_ns = union.between(t, end_ns)


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
