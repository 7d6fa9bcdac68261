"""Properties of competitive gap merging, strip alignment and the launch-sequence builder."""

from hypothesis import given, settings, strategies as st

from warmstart.analyzer.filemap import Piece
from warmstart.analyzer.gapmerge import merge_gaps
from warmstart.analyzer.sequence import from_requests, merge_recordings
from warmstart.analyzer.strips import split_at_strips, whole_stripes
from warmstart.model import BlockRequest, ScheduledFile


def Request(dev, sector, nr_sectors, is_write=False, is_meta=False, cpu_before_ns=0):
    """A recorded request as the recorder stores it."""
    return BlockRequest(dev, sector, nr_sectors, ("W" if is_write else "R") + ("M" if is_meta else ""), 0,
                        cpu_before_ns=cpu_before_ns)

F = ScheduledFile(b"/f", 1, 2, 1 << 30, 0, 0)


def _sectors(pieces):
    out = set()
    for p in pieces:
        out.update(range(p.sector, p.end))
    return out


sorted_pieces = st.lists(st.tuples(st.integers(0, 4000), st.integers(1, 64), st.booleans()), max_size=40).map(
    lambda xs: _layout(xs))


def _layout(xs):
    """Non-overlapping LBA-sorted pieces: device ranges, or ranges of one file laid out contiguously."""
    out, pos = [], 0
    for gap, n, as_file in xs:
        s = pos + gap * 8
        if as_file:
            out.append(Piece(1, s, n * 8, False, F, s * 512, n * 4096))
        else:
            out.append(Piece(1, s, n * 8, False, None, 0, n * 4096))
        pos = s + n * 8
    return out


@settings(max_examples=150, deadline=None)
@given(sorted_pieces, st.integers(0, 1 << 21), st.sampled_from([None, 8192, 65536]))
def test_gap_merge_covers_everything_and_counts_exactly_the_gaps_read(pieces, limit, cheap):
    # worth: a distance-dependent switch cost; here gaps up to `cheap` bytes are worth reading
    worth = None if cheap is None else (lambda gap: gap <= cheap)
    merged, stats = merge_gaps(pieces, limit, worth)
    assert _sectors(pieces) <= _sectors(merged)
    assert (len(_sectors(merged)) - len(_sectors(pieces))) * 512 == stats.waste_bytes
    assert len(merged) == len(pieces) - stats.merged_gaps - sum(
        1 for a, b in zip(pieces, pieces[1:]) if b.sector == a.end) + sum(
        1 for a, b in zip(pieces, pieces[1:]) if b.sector == a.end and not _mergeable(a, b))
    for p in merged:  # a file piece still names the file's own bytes at its offset
        if p.file is not None:
            assert p.file_offset == p.sector * 512 and p.length == p.nr_sectors * 512
    for a, b in zip(merged, merged[1:]):
        gap = (b.sector - a.end) * 512
        assert gap >= 0
        if gap <= limit and _mergeable(a, b) and (worth is None or gap == 0 or worth(gap)):
            raise AssertionError("a mergeable gap under the limit was left")
    # every gap read through was under the limit and worth reading
    covered = _sectors(pieces)
    for p in merged:
        run = 0
        for sec in range(p.sector, p.end + 1):
            if sec < p.end and sec not in covered:
                run += 1
            elif run:
                assert run * 512 <= limit and (worth is None or worth(run * 512)), run
                run = 0


def _mergeable(a, b):
    return (a.file is None and b.file is None) or (a.file is not None and a.file == b.file)


@settings(max_examples=150, deadline=None)
@given(sorted_pieces, st.sampled_from([4096, 65536, 131072]), st.integers(2, 8))
def test_strip_split_never_crosses_a_strip_and_stripes_are_whole(pieces, strip, disks):
    split = split_at_strips(pieces, strip)
    assert _sectors(split) == _sectors(pieces)
    for p in split:
        assert p.sector // (strip // 512) == (p.end - 1) // (strip // 512)
    widened, waste = whole_stripes(split, strip, disks)
    assert _sectors(pieces) <= _sectors(widened)
    assert (len(_sectors(widened)) - len(_sectors(pieces))) * 512 == waste
    stripe = strip * disks // 512
    # every long contiguous run of the input ends up inside whole stripes that are read
    cov = _sectors(widened)
    for p in pieces:
        if p.nr_sectors >= stripe:
            lo = p.sector // stripe * stripe
            assert all(s in cov for s in range(lo, p.sector))


@settings(max_examples=100, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 200), st.integers(1, 16), st.booleans(), st.integers(0, 10 ** 6)),
                max_size=50))
def test_sequence_drops_writes_and_rereads_and_keeps_cpu(reqs):
    rs = [Request(1, s * 8, n * 8, w, False, c) for s, n, w, c in reqs]
    seq = from_requests(rs, tail_cpu_ns=5)
    reads = set()
    for r in rs:
        if not r.is_write:
            reads.update(range(r.sector, r.sector + r.nr_sectors))
    got = [x for a in seq.accesses for x in range(a.sector, a.end)]
    assert len(got) == len(set(got)) and set(got) == reads     # each read sector once, no writes
    assert seq.cpu_ns == (sum(c for *_, c in reqs) + 5 if seq.accesses else 0)
    assert seq.dropped_writes == sum(1 for r in rs if r.is_write)


def test_merge_of_recordings_keeps_k_of_n_blocks_in_median_order():
    a = from_requests([Request(1, 0, 8), Request(1, 800, 8), Request(1, 80, 8)])
    b = from_requests([Request(1, 0, 8), Request(1, 80, 8), Request(1, 800, 8)])
    c = from_requests([Request(1, 80, 8), Request(1, 0, 8), Request(1, 4000, 8)])
    m = merge_recordings([(1, a), (2, b), (3, c)], k=2)
    assert [x.sector for x in m.accesses] == [0, 80, 800]     # 4000 seen once: dropped
    assert [round(c.fraction, 2) for c in m.coverage] == [1.0, 1.0, 0.67]
