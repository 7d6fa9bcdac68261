"""Where the launch sequence puts the app's CPU (analyzer/sequence.py, placed_cpu): all threads,
at the reads it really ran between, none moved to the end of the launch."""

from hypothesis import given, settings, strategies as st

from warmstart.analyzer.sequence import from_requests, placed_cpu
from warmstart.model import BlockRequest
from warmstart.recorder.cputime import CpuCurve, assign_busy, assign_cpu, busy_curve

ms = 1_000_000


def _recorded(intervals, reqs, end):
    """The requests as the recorder stores them: cpu_before_ns and the busy times from the tasks'
    on-CPU intervals; returns the launch's total CPU (the recordings.cpu_total_s of the recorder)."""
    curve = CpuCurve(intervals)
    assign_cpu(reqs, curve, 0, end)
    assign_busy(reqs, intervals, {tid: 0 for _, _, tid in intervals}, end, 2)
    return curve.between(0, end)


def test_a_worker_threads_cpu_under_an_outstanding_read_stays_where_it_ran():
    """Main thread (1) reads A, then B; B is slow. While B is outstanding a worker (2) computes
    50 ms (a JIT compiling, a parser thread). Then the main thread reads C and computes 10 ms.
    The 50 ms ran before C was asked for, so it cannot need C: a prefetcher fetching C meanwhile
    hides it. cpu_before_ns counts only CPU while no read is outstanding, so the 50 ms went to
    the end of the launch (cpu_total - sum), where it hides nothing."""
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
    # c_A: before A's issue (2) + up to B's issue (2); c_B: B's issue to C's (worker 50 + main 2);
    # c_C: after C's issue (10)
    assert [a.cpu_ns for a in seq.accesses] == [4 * ms, 52 * ms, 10 * ms]
    # the old placement (recordings without busy times) moved the worker's 50 ms to the last read
    for r in reqs:
        r.busy_union_after_ns = None
    old = from_requests(reqs, cpu_total_ns=total)
    assert old.cpu_placement == "cpu_before"
    assert [a.cpu_ns for a in old.accesses] == [4 * ms, 2 * ms, 60 * ms]


def test_two_threads_at_once_count_once():
    """Two threads computing at the same time take the wall time once (the union): the app needs
    that long after the data, not the sum."""
    intervals = [(0, 1 * ms, 1), (5 * ms, 45 * ms, 1), (5 * ms, 45 * ms, 2)]
    reqs = [BlockRequest(1, 0, 8, "R", issue_ns=1 * ms, complete_ns=5 * ms)]
    total = _recorded(intervals, reqs, 45 * ms)
    assert total == 81 * ms
    assert [a.cpu_ns for a in from_requests(reqs, cpu_total_ns=total).accesses] == [41 * ms]


def test_cpu_waiting_for_a_slow_read_is_not_placed_before_the_reads_issued_meanwhile():
    """A readahead R issued early completes late (1.6 s outstanding in a recording of pycompile
    on the loaded machine); meanwhile the app reads X and Y and computes after each. Placing CPU
    by completions (the busy time left once every read so far had arrived) put all the CPU up to
    R's completion before X: as if it needed neither X nor Y. By issues, it stays after them."""
    intervals = [(20 * ms, 30 * ms, 1), (40 * ms, 70 * ms, 1), (80 * ms, 120 * ms, 1)]
    reqs = [BlockRequest(1, 0, 8, "RA", issue_ns=10 * ms, complete_ns=200 * ms),    # R
            BlockRequest(1, 8000, 8, "R", issue_ns=11 * ms, complete_ns=20 * ms),   # X
            BlockRequest(1, 90000, 8, "R", issue_ns=30 * ms, complete_ns=40 * ms),  # Y
            BlockRequest(1, 99000, 8, "R", issue_ns=70 * ms, complete_ns=80 * ms)]  # Z
    _recorded(intervals, reqs, 200 * ms)
    cpu = [a.cpu_ns for a in from_requests(reqs).accesses]
    assert cpu == [0, 10 * ms, 30 * ms, 40 * ms]


def _intervals(draw_gaps):
    """Non-overlapping on-CPU intervals (one task at a time: F == B) from (gap, length) pairs."""
    out, t = [], 0
    for gap, length in draw_gaps:
        t += gap
        out.append((t, t + length, 1))
        t += length
    return out, t


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 50), st.integers(1, 50)), min_size=1, max_size=30),
       st.lists(st.tuples(st.integers(0, 400), st.integers(1, 100), st.booleans()), min_size=1, max_size=30),
       st.booleans())
def test_cpu_after_each_issue_is_never_placed_earlier_and_exact_for_sequential_reads(cpu, ios, sequential):
    """For every read p_k, the CPU the sequence places after it (c_k + ... + c_n) is at least the
    busy time that ran after p_k was issued: no CPU goes before a read it may need. When each read
    completes before the next is issued (a synchronous reader), it is exactly that. Nothing is
    lost beyond the CPU under the first read."""
    intervals, end = _intervals(cpu)
    reqs, t = [], 0
    for i, (gap, dur, write) in enumerate(ios):
        t = t + gap if not sequential else t + gap + 1
        issue, done = t, t + dur
        if sequential:
            t = done
        reqs.append(BlockRequest(1, i * 64, 8, "W" if write and not sequential else "R",
                                 issue_ns=issue, complete_ns=done))
    end = max(end, t, max(r.complete_ns for r in reqs)) + 1
    _recorded(intervals, reqs, end)
    reads = [r for r in reqs if not r.is_write]
    if not reads:
        return
    seq = from_requests(reqs)
    assert len(seq.accesses) == len(reads)
    curve = busy_curve(intervals)
    after = [sum(a.cpu_ns for a in seq.accesses[k:]) for k in range(len(reads))]
    for k in range(1, len(reads)):
        # (the busy time while the first read is outstanding is not recorded: left out)
        truth = curve.between(max(reads[k].issue_ns, reads[0].complete_ns), end)
        assert after[k] >= truth
        if sequential:
            assert after[k] == truth
    lost_under_first = curve.between(reads[0].issue_ns, reads[0].complete_ns)
    assert curve.between(0, end) - lost_under_first <= after[0] <= curve.between(0, end)
    placed, tail = placed_cpu(reqs)
    assert all(c >= 0 for c in placed) and tail >= 0
