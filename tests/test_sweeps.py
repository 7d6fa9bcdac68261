"""Later segments' pieces read by an earlier sweep that passes near them (analyzer/sweeps.py)."""

from collections import Counter

from hypothesis import given, settings
from hypothesis import strategies as st

from warmstart.analyzer.filemap import Piece
from warmstart.analyzer.ordering import fetch_order
from warmstart.analyzer.profile import class_profile
from warmstart.analyzer.segment import segments_launch_time
from warmstart.analyzer.sweeps import Sweeps, pull_forward
from warmstart.model import ScheduledFile

HDD = class_profile(True, 64 << 30)
F = ScheduledFile(b"/f", 1, 2, 1 << 40, 0, 0)
GIB = 1 << 21    # sectors


def piece(sector, sectors=8):
    return Piece(1, sector, sectors, False, F, sector * 512, sectors * 512)


def cost(pieces):
    return HDD.access_time([(p.dev, p.sector * 512, p.nr_sectors * 512) for p in fetch_order(pieces)])


def sweeps(segs, cpu):
    spans, a = [], 0
    for s in segs:
        spans.append((a, a + 9))
        a += 10
    return Sweeps(spans, [list(s) for s in segs], [cost(s) for s in segs], list(cpu))


def test_a_piece_next_to_the_first_sweep_is_read_by_it():
    """Segment 2's piece lies 64 KiB past one segment 1 reads, 10 GiB from segment 2's other
    piece; the app computes 15 ms after segment 1, less than segment 2's two switches (24 ms):
    reading `near` in the first sweep costs a short hop (5 ms), in the second a switch the app
    waits for. `far` stays: its 10 GiB seek is hidden behind the 15 ms there."""
    near, far = piece(10 * GIB + 136), piece(20 * GIB)
    sw = sweeps([[piece(0), piece(10 * GIB)], [near, far]], [0.015, 0.001])
    out, pulled = pull_forward(sw, HDD)
    assert near in out.pieces[0] and out.pieces[1] == [far]
    assert pulled.pieces == 1 and pulled.t_after_s < pulled.t_before_s
    assert pulled.t_after_s == segments_launch_time(out.t_disk, out.cpu)


def test_nothing_moves_where_the_later_sweep_is_hidden_behind_cpu():
    """The same pieces, but 2 s of CPU after segment 1 hides all of segment 2's fetch: moving
    anything would only lengthen the pre-buffer."""
    sw = sweeps([[piece(0), piece(10 * GIB)], [piece(10 * GIB + 136), piece(20 * GIB)]], [2.0, 0.001])
    out, pulled = pull_forward(sw, HDD)
    assert pulled.pieces == 0 and out.pieces == sw.pieces and out.t_disk == sw.t_disk


def test_an_emptied_segment_joins_the_one_before_with_its_cpu():
    sw = sweeps([[piece(0)], [piece(16)], [piece(40 * GIB)]], [0.001, 0.2, 0.001])
    out, pulled = pull_forward(sw, HDD)
    assert pulled.pieces >= 1 and len(out.spans) < 3
    assert out.spans[0][0] == 0 and out.spans[-1][1] == 29
    assert all(b + 1 == c for (_, b), (c, _) in zip(out.spans, out.spans[1:]))
    assert sum(out.cpu) == sum(sw.cpu)


@settings(max_examples=150, deadline=None)
@given(st.lists(st.lists(st.tuples(st.integers(0, 64 * GIB), st.integers(1, 256)), min_size=1, max_size=8),
                min_size=1, max_size=5),
       st.lists(st.floats(0.0, 0.5), min_size=5, max_size=5))
def test_pieces_only_move_earlier_and_the_launch_never_gets_longer(segs, cpu):
    segs = [[piece(s, n) for s, n in seg] for seg in segs]
    sw = sweeps(segs, cpu[:len(segs)])
    out, pulled = pull_forward(sw, HDD)
    # the same pieces, each read once, each sweep in fetch order
    assert Counter(map(id, (p for s in out.pieces for p in s))) == Counter(map(id, (p for s in segs for p in s)))
    assert all(s == fetch_order(s) for s in out.pieces)
    was = {id(p): k for k, s in enumerate(sw.spans) for p in segs[k]}
    first_p = {k: a for k, (a, _) in enumerate(sw.spans)}
    for k, (a, _) in enumerate(out.spans):
        for p in out.pieces[k]:
            assert a <= first_p[was[id(p)]]          # never later than its own segment
    assert set(map(id, segs[0])) <= set(map(id, out.pieces[0]))     # the first sweep loses nothing
    assert pulled.t_after_s <= pulled.t_before_s + 1e-9
    assert pulled.t_after_s == segments_launch_time(out.t_disk, out.cpu)
    assert abs(sum(out.cpu) - sum(sw.cpu)) < 1e-9 and all(t >= 0 for t in out.t_disk)
