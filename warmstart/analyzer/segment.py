"""Split P into contiguous subsequences, each fetched in disk order (the core of the analyzer).

Two algorithms, both on the same DISK_ACCESS cost (model or real disk, see access.py):

- `paper`: Algorithm 1 of launch-prefetcher-reordering-interleaving.md, faithfully: seed with
  (p_n), t_i = DISK_ACCESS(sorted q_i), take CPU time backwards until it covers t_i, repeat until
  the head; t_exp = t_m + t_(m-1) + CPU of everything after the first (pre-buffer) subsequence.
- `optimal` (default): minimises the modelled launch time directly. With segments fetched back
  to back and the app running segment j's CPU once segment j is in,
      T = max over j of ( t_1 + ... + t_j  +  CPU(segment j .. segment m) )      (fetch order)
  (the paper's t_exp is the j = 2 term). Candidates: one segment (= reorder), the paper's split,
  and tail walks with the CPU-cover factor scaled; the best is then improved by local search
  (move, remove and add boundaries) until no move helps or the evaluation budget is spent.
  Because one segment and the paper's split are candidates, the result is never worse than
  either on the cost it was searched with.

Indexes here are 0-based and inclusive: a segment (a, b) is p[a..b]. Segments are returned in
fetch order (the pre-buffer first).
"""

import time
from dataclasses import dataclass, field
from typing import Callable, Dict, List, Sequence, Tuple

Seg = Tuple[int, int]


@dataclass
class Result:
    algorithm: str
    segments: List[Seg]          # fetch order; (a, b) inclusive, 0-based
    t_disk: List[float]          # t_i of each segment (same order)
    cpu: List[float]             # CPU time of each segment
    t_exp: float                 # the algorithm's own estimate
    t_model: float               # T of the formula above, on the same cost
    evaluations: int = 0
    notes: Dict[str, object] = field(default_factory=dict)


class Cost:
    """DISK_ACCESS of p[a..b] in disk order, cached; subclasses say how it is measured."""

    def __init__(self):
        self._cache: Dict[Seg, float] = {}
        self.calls = 0

    def __call__(self, a: int, b: int) -> float:
        key = (a, b)
        t = self._cache.get(key)
        if t is None:
            self.calls += 1
            t = self._cache[key] = self.measure(a, b)
        return t

    def measure(self, a: int, b: int) -> float:
        raise NotImplementedError

    def measured(self) -> Dict[Seg, float]:
        """Every DISK_ACCESS this cost has answered: (a, b) -> seconds."""
        return dict(self._cache)

    def exhausted(self) -> bool:
        """True when no more new measurements should be made (budget spent)."""
        return False


def launch_time(segs: Sequence[Seg], cost: Callable[[int, int], float], cpu_prefix: Sequence[float]) -> float:
    """T = max_j (sum_{i<=j} t_i + CPU of segments j..m); cpu_prefix[k] = CPU of p[0..k-1]."""
    total_cpu = cpu_prefix[-1]
    return pipelined([cost(a, b) for a, b in segs], [total_cpu - cpu_prefix[a] for a, _ in segs])


def pipelined(t_disk: Sequence[float], cpu_from: Sequence[float]) -> float:
    """The launch-time formula: max_j (t_1 + ... + t_j + cpu_from[j]), where t_i is segment i's
    fetch time and cpu_from[j] the app's CPU time from segment j to the end."""
    d = 0.0
    best = 0.0
    for t, rest in zip(t_disk, cpu_from):
        d += t
        best = max(best, d + rest)
    return best


def segments_launch_time(t_disk: Sequence[float], cpu: Sequence[float]) -> float:
    """T of stored segments: their fetch times t_i and each one's CPU time."""
    return pipelined(t_disk, [sum(cpu[j:]) for j in range(len(cpu))])


def _prefix(cpu: Sequence[float]) -> List[float]:
    out = [0.0]
    for c in cpu:
        out.append(out[-1] + c)
    return out


def _tail_walk(n: int, cpu: Sequence[float], cost, factor: float = 1.0) -> List[Seg]:
    """Algorithm 1's construction (factor 1); tail first. CPU must cover factor * t_i."""
    segs = [(n - 1, n - 1)]
    lo = n - 1
    t = cost(lo, lo)
    while lo > 0:
        hi = lo - 1
        j, acc = lo, 0.0
        while True:  # GET_NEXT_SUBSEQUENCE
            j -= 1
            acc += cpu[j]
            if acc >= factor * t or j == 0:
                break
        segs.append((j, hi))
        lo = j
        t = cost(j, hi)
    segs.reverse()
    return segs


def paper(cpu: Sequence[float], cost: Cost) -> Result:
    """Algorithm 1, with t_exp of its line 12 (for m = 1: t_1 + all CPU, the formula's intent)."""
    n = len(cpu)
    if n == 0:
        return Result("paper", [], [], [], 0.0, 0.0)
    segs = _tail_walk(n, cpu, cost)
    pre = _prefix(cpu)
    t = [cost(a, b) for a, b in segs]
    c = [pre[b + 1] - pre[a] for a, b in segs]
    if len(segs) == 1:
        t_exp = t[0] + pre[-1]
    else:
        t_exp = t[0] + t[1] + (pre[-1] - pre[segs[1][0]])
    return Result("paper", segs, t, c, t_exp, launch_time(segs, cost, pre), cost.calls)


def reorder(cpu: Sequence[float], cost: Cost) -> Result:
    """One segment: fetch everything LBA-sorted, then launch (the papers' baseline)."""
    n = len(cpu)
    if n == 0:
        return Result("reorder", [], [], [], 0.0, 0.0)
    t = cost(0, n - 1)
    return Result("reorder", [(0, n - 1)], [t], [sum(cpu)], t + sum(cpu), t + sum(cpu), cost.calls)


def _segs_from_bounds(n: int, bounds: Sequence[int]) -> List[Seg]:
    """bounds: sorted start indexes of segments 2..m."""
    starts = [0] + list(bounds)
    ends = list(bounds) + [n]
    return [(s, e - 1) for s, e in zip(starts, ends)]


def optimise(cpu: Sequence[float], cost: Cost, time_budget_s: float = 0.5,
             factors: Sequence[float] = (0.5, 0.75, 1.25, 1.5, 2.0, 3.0),
             cpu_scales: Sequence[float] = (1.0,)) -> Result:
    """Minimise T over segmentations (see the module docstring).

    cpu_scales: the app's CPU in the prefetched launch is not the recorded one (a traced cold
    launch spends more CPU: the I/O path, the tracer). With several scales the search is robust:
    it minimises the worst over the scales of T(segmentation) / T(reorder) on cpu x scale, so
    the result is never modelled worse than one LBA-sorted segment under any of them; ties go
    to T on the first scale, which is also the T reported (t_model)."""
    n = len(cpu)
    if n == 0:
        return Result("optimal", [], [], [], 0.0, 0.0)
    deadline = time.monotonic() + time_budget_s
    scales = list(cpu_scales) or [1.0]
    pres = [_prefix([c * k for c in cpu]) for k in scales]
    pre = pres[0]
    t_one = [launch_time([(0, n - 1)], cost, p) for p in pres]

    def objective(bounds) -> Tuple[float, float, float]:
        segs = _segs_from_bounds(n, bounds)
        ts = [launch_time(segs, cost, p) for p in pres]
        worst = max(t / r if r > 0 else t for t, r in zip(ts, t_one)) if len(ts) > 1 else ts[0]
        # tie-break on total disk time: fewer seeks help even where T is flat
        return (round(worst, 9), round(ts[0], 9), sum(cost(a, b) for a, b in segs))

    candidates = {"reorder": (), "paper": tuple(s[0] for s in _tail_walk(n, cpu, cost)[1:])}
    for f in factors:
        if time.monotonic() > deadline or cost.exhausted():
            break
        candidates[f"walk x{f}"] = tuple(s[0] for s in _tail_walk(n, cpu, cost, f)[1:])
    scored = {name: objective(b) for name, b in candidates.items()}
    start_name = min(scored, key=lambda k: scored[k])
    bounds = list(candidates[start_name])
    best = scored[start_name]

    # Local search: first improvement over moves of each boundary by shrinking steps,
    # removal of a boundary, and a new boundary in the middle of a segment.
    steps = []
    s = max(1, n // 4)
    while s >= 1:
        steps.append(s)
        s //= 2
    rounds = 0
    improved = True
    while improved and time.monotonic() < deadline and not cost.exhausted():
        improved = False
        rounds += 1
        moves = []
        for i in range(len(bounds)):
            moves.append(bounds[:i] + bounds[i + 1:])
            for st in steps:
                for d in (-st, st):
                    nb = bounds[i] + d
                    lo = bounds[i - 1] if i else 0
                    hi = bounds[i + 1] if i + 1 < len(bounds) else n
                    if lo < nb < hi:
                        moves.append(bounds[:i] + [nb] + bounds[i + 1:])
        for a, b in _segs_from_bounds(n, bounds):
            if b > a:
                for frac in (0.25, 0.5, 0.75):
                    mid = a + max(1, int((b - a + 1) * frac))
                    if a < mid <= b:
                        moves.append(sorted(bounds + [mid]))
        for cand in moves:
            if time.monotonic() > deadline or cost.exhausted():
                break
            score = objective(cand)
            if score < best:
                best, bounds, improved = score, cand, True
                break
    segs = _segs_from_bounds(n, bounds)
    t = [cost(a, b) for a, b in segs]
    c = [pre[b + 1] - pre[a] for a, b in segs]
    T = launch_time(segs, cost, pre)
    notes = {"start": start_name, "rounds": rounds, "cpu_scales": scales,
             "candidates": {k: v[0] for k, v in scored.items()}}
    return Result("optimal", segs, t, c, T, T, cost.calls, notes)
