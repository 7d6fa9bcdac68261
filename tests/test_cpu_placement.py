"""Where the launch sequence puts the app's CPU (analyzer/sequence.py, placed_cpu): all threads,
at the reads it really ran between, none moved to the end of the launch."""

from hypothesis import given, settings, strategies as st

from warmstart.analyzer.sequence import from_requests, placed_cpu
from warmstart.model import BlockRequest
from warmstart.recorder.cputime import CpuCurve, assign_busy, assign_cpu, busy_curve

ms = 1_000_000


def _recorded(intervals, reqs, end):
    """The requests as the recorder stores them: cpu_before_ns and busy_after_ns from the tasks'
    on-CPU intervals; returns the launch's total CPU (the recordings.cpu_total_s of the recorder)."""
    curve = CpuCurve(intervals)
    assign_cpu(reqs, curve, 0, end)
    assign_busy(reqs, busy_curve(intervals), end)
    return curve.between(0, end)


def test_a_worker_threads_cpu_under_an_outstanding_read_stays_where_it_ran():
    """Main thread (1) reads A, then B; B is slow. While B is outstanding a worker (2) computes
    50 ms on what A brought (a JIT compiling, a parser thread). Then the main thread reads C and
    computes 10 ms. The 50 ms can run as soon as A is in, before B and C arrive: a prefetcher
    fetching B and C meanwhile hides them. cpu_before_ns counts only CPU while no read is
    outstanding, so the 50 ms went to the end of the launch (cpu_total - sum), where it hides
    nothing."""
    intervals = [(0, 2 * ms, 1),             # exec, up to A's issue
                 (12 * ms, 14 * ms, 1),      # A in: main thread issues B
                 (14 * ms, 64 * ms, 2),      # worker: 50 ms while B is outstanding
                 (80 * ms, 82 * ms, 1),      # B in at 80 ms: main issues C
                 (90 * ms, 100 * ms, 1)]     # C in at 90 ms: 10 ms to the exit
    reqs = [BlockRequest(1, 0, 8, "R", issue_ns=2 * ms, complete_ns=12 * ms),
            BlockRequest(1, 8000, 8, "R", issue_ns=14 * ms, complete_ns=80 * ms),
            BlockRequest(1, 90000, 8, "R", issue_ns=82 * ms, complete_ns=90 * ms)]
    total = _recorded(intervals, reqs, 100 * ms)
    seq = from_requests(reqs, cpu_total_ns=total)
    assert seq.cpu_placement == "busy"
    cpu = [a.cpu_ns for a in seq.accesses]
    # after A (until B arrives): 2 + 50 ms; after B: 2 ms; after C: 10 ms; before A: 2 ms into c_1
    assert cpu == [2 * ms + 52 * ms, 2 * ms, 10 * ms]
    assert sum(cpu) == total                   # single CPU at a time here: union == sum, none lost
    # the old placement (recordings without busy times) moved the worker's 50 ms to the last read
    for r in reqs:
        r.busy_after_ns = None
    old = from_requests(reqs, cpu_total_ns=total)
    assert old.cpu_placement == "cpu_before"
    assert [a.cpu_ns for a in old.accesses][-1] == 60 * ms


def test_two_threads_at_once_count_once():
    """Two threads computing at the same time take the wall time once (the union): the app needs
    that long after the data, not the sum."""
    intervals = [(0, 1 * ms, 1), (5 * ms, 45 * ms, 1), (5 * ms, 45 * ms, 2)]
    reqs = [BlockRequest(1, 0, 8, "R", issue_ns=1 * ms, complete_ns=5 * ms)]
    _recorded(intervals, reqs, 45 * ms)
    seq = from_requests(reqs)
    assert [a.cpu_ns for a in seq.accesses] == [1 * ms + 40 * ms]


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 10 ** 9), st.integers(0, 10 ** 7)), min_size=1, max_size=40),
       st.lists(st.integers(0, 3), max_size=40))
def test_the_cpu_after_each_read_is_the_busy_time_after_all_reads_so_far(reads, writes_at):
    """For every k, the CPU the sequence places after p_k (c_k + ... + c_n) is the busy time left
    once p_1..p_k had all arrived (the smallest busy_after_ns over them; c_1 also holds the CPU before
    p_1): the same quantity as the
    lower bound's B_k (analyzer/bound.py), so the model never places CPU before data it may
    need, and never later than where it ran. Writes in between change nothing."""
    reqs = []
    for i, (busy, before) in enumerate(reads):
        for _ in range(writes_at[i] if i < len(writes_at) else 0):
            reqs.append(BlockRequest(1, 10 ** 6 + len(reqs) * 8, 8, "W", issue_ns=0, cpu_before_ns=before))
        # distinct, never adjacent sectors: one access per read, in order
        reqs.append(BlockRequest(1, i * 64, 8, "R", issue_ns=i, complete_ns=i + 1, busy_after_ns=busy,
                                 cpu_before_ns=before))
    seq = from_requests(reqs, tail_cpu_ns=12345)
    assert len(seq.accesses) == len(reads)
    cpu = [a.cpu_ns for a in seq.accesses]
    for k in range(1, len(reads)):
        assert sum(cpu[k:]) == min(b for b, _ in reads[:k + 1])
    assert sum(cpu) == reads[0][1] + reads[0][0]      # CPU before the first read, then all busy time after it
    placed, tail = placed_cpu(reqs)
    assert all(c >= 0 for c in placed) and tail == min(b for b, _ in reads)
