"""Online pattern prefetcher: per-file stream recognition on the launch's page-cache misses.

Every interval (50 ms: launches are seconds long, not the paper's minutes, so 0.5 s would see
the launch end first) the launch's misses of each file are merged into runs and classified
(VIO-prefetching): sequential (a run starts where the last ended), reverse (ends where the last
started), strided (same gap and size as the last). When the classified share of a stream's
pages reaches TH_SEQ (0.6) in two intervals it is prefetched ahead in its direction. Depth: slow start from 16
pages, doubling per interval the stream stays linear, up to S x D where D = C_switch x R_tr
(the competitive depth, from the device profile). S, the aggressiveness, is fed back each
interval: linear misses still reaching the disk inside a stream we prefetch -> S up; prefetched
pages the launch passed without using -> S down.
"""

import os
from dataclasses import dataclass, field
from typing import Dict, Iterable, List, Set, Tuple

from .tracer import PAGE, PageEvent

TH_SEQ = 0.6
# Reactive cost/benefit (Fraser & Chang §6): a prefetched page not used within JUDGE_AFTER
# intervals counts as waste; once JUDGE_MIN_PAGES have been judged and fewer than USEFUL_SHARE
# of them were used, prefetching stops for the rest of the launch (it only costs disk time).
JUDGE_AFTER = 4
JUDGE_MIN_PAGES = 64
USEFUL_SHARE = 0.5
PROBATION_PAGES = 128   # before the first judgement, at most this much is prefetched
SLOW_START_PAGES = 16
S_MIN, S_MAX = 0.25, 4.0
# Without a device profile: the emulated 7200 rpm disk's numbers (docs/emulated-disk.md):
# average seek 8.5 ms + half a revolution 4.17 ms, 130 MB/s.
DEFAULT_C_SWITCH_S = 0.0127
DEFAULT_R_TR_BPS = 130e6

Key = Tuple[int, int]  # (dev, ino)


def competitive_depth_pages(c_switch_s: float, r_tr_bps: float) -> int:
    """What transfers during one average I/O switch, in pages (2-competitive, Li et al.)."""
    return max(SLOW_START_PAGES, int(c_switch_s * r_tr_bps) // PAGE)


def merge_runs(evs: Iterable[PageEvent]) -> List[Tuple[int, int]]:
    """Misses in event order -> runs (first, npages), contiguous ascending pages merged."""
    runs: List[List[int]] = []
    for e in evs:
        if runs and e.first == runs[-1][0] + runs[-1][1]:
            runs[-1][1] += e.npages
        else:
            runs.append([e.first, e.npages])
    return [(a, n) for a, n in runs]


def classify(runs: List[Tuple[int, int]]) -> Tuple[str, float, int]:
    """-> (pattern, share of pages that fit it, stride gap) over one interval's runs."""
    total = sum(n for _, n in runs)
    if len(runs) < 2 or total == 0:
        return "none", 0.0, 0
    seq = rev = strided = 0
    for i in range(1, len(runs)):
        (pa, pn), (a, n) = runs[i - 1], runs[i]
        if a == pa + pn:
            seq += n
        elif a + n == pa:
            rev += n
        elif i >= 2:
            qa, qn = runs[i - 2]
            if a - (pa + pn) == pa - (qa + qn) and n == pn and a > pa:
                strided += n
    best = max((seq, "sequential"), (rev, "reverse"), (strided, "strided"))
    gap = runs[-1][0] - (runs[-2][0] + runs[-2][1]) if best[1] == "strided" else 0
    # the first run of the interval fits whatever the rest fits
    share = (best[0] + runs[0][1]) / total if best[0] else 0.0
    return best[1], share, gap


@dataclass
class Stream:
    key: Key
    depth: int = SLOW_START_PAGES
    next_page: int = 0            # first page not yet prefetched, in the stream's direction
    direction: int = 1
    last_runs: List[Tuple[int, int]] = field(default_factory=list)


class OnlinePrefetcher:
    """Feed it each interval's events with `step(events)`; it issues readahead(2) itself.

    fd_for(key) -> an open fd of that file or None (the caller knows the launch's processes).
    """

    def __init__(self, fd_for, c_switch_s: float = DEFAULT_C_SWITCH_S,
                 r_tr_bps: float = DEFAULT_R_TR_BPS, budget_pages: int = 65536):
        self.fd_for = fd_for
        self.depth_max = competitive_depth_pages(c_switch_s, r_tr_bps)
        self.S = 1.0
        self.streams: Dict[Key, Stream] = {}
        self.prefetched: Dict[Key, Set[int]] = {}
        self.used: Dict[Key, Set[int]] = {}
        self.budget_pages = budget_pages
        self.issued_pages = 0
        self.history: List[Tuple[float, str]] = []  # (S, reason) per adjustment
        self._tail: Dict[Key, Tuple[int, int]] = {}    # each stream's last miss, for the next interval
        self.interval = 0
        self._pending: List[Tuple[int, Key, int, int]] = []   # (interval, key, first, npages) not yet judged
        self.judged_pages = self.judged_used = 0
        self.off_reason = None    # set when cost/benefit switched prefetching off
        self._seen_linear: Set[Key] = set()   # files linear in one interval: confirmed by the next
        self.mapped: Set[Key] = set()         # files the launch faults on: left to the kernel

    def step(self, events: List[PageEvent]) -> None:
        misses: Dict[Key, List[PageEvent]] = {}
        self.interval += 1
        for e in events:
            k = (e.dev, e.ino)
            if e.kind == "miss":
                misses.setdefault(k, []).append(e)
            elif e.kind == "fault":
                self.mapped.add(k)
            self.used.setdefault(k, set()).update(range(e.first, e.first + e.npages))
        for k in self.mapped:
            # Misses of a mapped file are mostly the kernel's read-around of each fault: runs
            # that look sequential while the next fault lands elsewhere (node's binary: 94 %
            # of such prefetches unused). Its mmap readahead already follows sequential faults.
            misses.pop(k, None)
        if self._judge():
            return
        linear_missed = wasted = 0
        for k, evs in misses.items():
            # Classify the individual misses (a contiguous pair is sequential), continuing from
            # the stream's last miss of the previous interval; prefetch from the merged runs.
            prev = [self._tail[k]] if k in self._tail else []
            pattern, share, gap = classify(prev + [(e.first, e.npages) for e in evs])
            self._tail[k] = (evs[-1].first, evs[-1].npages)
            runs = merge_runs(evs)
            st = self.streams.get(k)
            if st is not None:
                # Feedback: misses inside the window we prefetched mean we were too shallow/late.
                pf = self.prefetched.get(k, set())
                linear_missed += sum(1 for e in evs for p in range(e.first, e.first + e.npages) if p in pf)
            if share < TH_SEQ:
                continue
            if st is None and k not in self._seen_linear:
                # One linear burst is what the kernel's own readahead (or mmap read-around)
                # looks like: it has already fetched it. Prefetch once a second interval confirms.
                self._seen_linear.add(k)
                continue
            if st is None:
                st = self.streams[k] = Stream(k)
            else:
                st.depth = min(st.depth * 2, max(SLOW_START_PAGES, int(self.S * self.depth_max)))
            last_a, last_n = runs[-1]
            if pattern == "reverse":
                st.direction, start = -1, min(st.next_page, last_a) if st.direction == -1 else last_a
                lo = max(0, start - st.depth)
                self._issue(k, lo, start - lo)
                st.next_page = lo
            elif pattern == "strided":
                a = last_a + last_n + gap
                for _ in range(max(1, st.depth // max(1, last_n))):
                    self._issue(k, a, last_n)
                    a += last_n + gap
                st.next_page = a
            else:
                start = max(st.next_page, last_a + last_n)
                self._issue(k, start, st.depth)
                st.next_page = start + st.depth
        # Waste seen so far: prefetched pages behind the launch's position that it skipped.
        for k, st in self.streams.items():
            pf, used = self.prefetched.get(k, set()), self.used.get(k, set())
            if used:
                pos = max(used) if st.direction > 0 else min(used)
                wasted += sum(1 for p in pf if (p < pos if st.direction > 0 else p > pos) and p not in used)
        if linear_missed > 0:
            self._adjust(1.5, "linear misses reached the disk")
        elif wasted > 0.5 * max(1, self.issued_pages):
            self._adjust(0.5, "more than half of the prefetched pages were skipped")

    def _judge(self) -> bool:
        """Judge prefetches old enough; True when prefetching is (now) off."""
        keep = []
        for when, k, first, n in self._pending:
            if self.interval - when < JUDGE_AFTER:
                keep.append((when, k, first, n))
                continue
            used = self.used.get(k, set())
            self.judged_pages += n
            self.judged_used += sum(1 for p in range(first, first + n) if p in used)
        self._pending = keep
        if self.off_reason is None and self.judged_pages >= JUDGE_MIN_PAGES and \
                self.judged_used < USEFUL_SHARE * self.judged_pages:
            self.off_reason = (f"{self.judged_used} of {self.judged_pages} prefetched pages used within "
                               f"{JUDGE_AFTER} intervals")
            self.history.append((0.0, "off: " + self.off_reason))
        return self.off_reason is not None

    def _adjust(self, factor: float, why: str) -> None:
        s = min(S_MAX, max(S_MIN, self.S * factor))
        if s != self.S:
            self.S = s
            self.history.append((s, why))

    def _issue(self, key: Key, first: int, npages: int) -> None:
        npages = min(npages, self.budget_pages - self.issued_pages)
        if self.judged_pages < JUDGE_MIN_PAGES:   # probation: prove useful before spending more
            npages = min(npages, PROBATION_PAGES - self.issued_pages)
        if npages <= 0 or first < 0:
            return
        fd = self.fd_for(key)
        if fd is None:
            return
        try:
            size = os.fstat(fd).st_size
            npages = min(npages, max(0, (size + PAGE - 1) // PAGE - first))
            if npages <= 0:
                return
            # WILLNEED is capped per call by the device's readahead limit: issue 128 KiB pieces.
            for off in range(first, first + npages, 32):
                os.posix_fadvise(fd, off * PAGE, min(32, first + npages - off) * PAGE,
                                 os.POSIX_FADV_WILLNEED)
        except OSError:
            return
        self.issued_pages += npages
        self.prefetched.setdefault(key, set()).update(range(first, first + npages))
        self._pending.append((self.interval, key, first, npages))
