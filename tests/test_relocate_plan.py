"""Relocation planning, file placement and the schedule model: pure logic on hand-made
schedules and extents (no root needed)."""

from warmstart.analyzer.access import schedule_cost
from warmstart.analyzer.ordering import fetch_order
from warmstart.analyzer.profile import class_profile
from warmstart.analyzer.segment import segments_launch_time
from warmstart.fiemap import Run, place
from warmstart.model import Extent, Range, Schedule, ScheduledFile, Segment
from warmstart.relocate import planner

BS = 4096


def _file(name: bytes, size: int) -> ScheduledFile:
    return ScheduledFile(b"/x/" + name, 1, abs(hash(name)) % 10**6, size, 0, 0)


def _sched(app: str, segments):
    """segments: list of lists of (file, offset, length)."""
    segs, files = [], []
    for i, reads in enumerate(segments, start=1):
        ranges = []
        for f, off, length in reads:
            if f not in files:
                files.append(f)
            ranges.append(Range(1, 1000 * i + off // 512, -(-length // 512), length, f, off))
        segs.append(Segment(i, 1, 1, 0.0, 0.01, sum(r.length for r in ranges), ranges))
    return Schedule(None, app, "paper", "model", 0.0, 0, 0, [], segs, files, {})


LIBC, LIBM, LIBX = _file(b"libc", 2 * 2**20), _file(b"libm", 2**20), _file(b"libx", 64 * 2**20)
A1, A2, B1 = _file(b"a1", 300000), _file(b"a2", 100000), _file(b"b1", 50000)
A = _sched("a", [[(A1, 0, 65536), (LIBM, 0, 4096)], [(LIBC, 0, 8192), (A2, 0, 100000)]])
B = _sched("b", [[(LIBC, 4096, 4096), (B1, 0, 50000), (LIBM, 0, 4096)]])
C = _sched("c", [[(LIBC, 0, 4096), (LIBX, 0, 4096), (LIBX, 32 * 2**20, 8192)]])


def _blocks(*files):
    return {f.path: -(-f.size // BS) for f in files}


def test_common_region_first_most_read_first_then_each_app_in_schedule_order():
    layout = planner.plan_layout({"a": A, "b": B}, [A, B, C], _blocks(LIBC, LIBM, LIBX, A1, A2, B1),
                                 BS, granularity="file")
    order = [(p.region, p.path) for p in layout.pieces]
    # libc is read by 3 schedules, libm by 2: common, libc first; then a's files, then b's.
    assert order == [("common", LIBC.path), ("common", LIBM.path), ("a", A1.path), ("a", A2.path), ("b", B1.path)]
    assert [p.readers for p in layout.pieces] == [3, 2, 1, 1, 1]
    # Pieces follow each other without gaps, whole files.
    ends = [p.region_block + p.nblocks for p in layout.pieces]
    assert [p.region_block for p in layout.pieces[1:]] == ends[:-1]
    assert layout.region_blocks == sum(_blocks(LIBC, LIBM, A1, A2, B1).values())


def test_refused_files_are_left_out_and_page_alignment_is_kept():
    movable = _blocks(LIBC, A1, A2)      # libm and b1 refused
    layout = planner.plan_layout({"a": A}, [A, B], movable, 1024, page_blocks=4, granularity="range")
    assert LIBM.path not in {p.path for p in layout.pieces}
    for p in layout.pieces:
        assert p.region_block % 4 == p.file_block % 4


def test_range_granularity_moves_only_touched_blocks_of_big_files():
    layout = planner.plan_layout({"c": C}, [C], _blocks(LIBC, LIBX), BS, granularity="auto")
    libx = [p for p in layout.pieces if p.path == LIBX.path]
    # 64 MiB file, two small reads far apart: two pieces, not 16384 blocks.
    assert [(p.file_block, p.nblocks) for p in libx] == [(0, 1), (32 * 2**20 // BS, 2)]
    small = planner.plan_layout({"a": A}, [A], _blocks(A2), BS, granularity="auto")
    assert [(p.file_block, p.nblocks) for p in small.pieces] == [(0, 25)]   # small file: whole
    whole = planner.plan_layout({"c": C}, [C], _blocks(LIBC, LIBX), BS, granularity="file")
    assert whole.region_blocks == 512 + 16384 > layout.region_blocks


def test_touched_ranges_merge_small_gaps():
    s = _sched("d", [[(LIBX, 0, 4096), (LIBX, 8192, 4096), (LIBX, 10 * 2**20, 4096)]])
    assert planner.touched_blocks([s], LIBX.path, BS) == [(0, 3), (2560, 2561)]


def _one_segment(runs):
    f = _file(b"m", 64 * 2**20)
    rs = [Range(1, sector, n, n * 512, f, i * n * 512) for i, (sector, n) in enumerate(runs)]
    return Schedule(None, "m", "paper", "model", 0.0, 0, 0, [], [Segment(1, 1, 1, 0.0, 0.01, 0, rs)], [f], {})


def test_model_contiguous_fetch_is_one_request_and_far_cheaper():
    prof = class_profile(True, 2 * 10**9)
    scattered = _one_segment([(i * 200000, 256) for i in range(100)])
    packed = _one_segment([(i * 256, 256) for i in range(100)])
    a, b = schedule_cost(scattered, prof), schedule_cost(packed, prof)
    assert (a.requests, a.seeks) == (100, 100)
    assert (b.requests, b.seeks) == (1, 1)
    assert b.fetch_s < a.fetch_s / 5
    # where the ranges are said to be (a relocation's prediction) is what is costed
    moved = schedule_cost(scattered, prof, lambda r: [(r.sector // 200000 * 256, r.nr_sectors)])
    assert (moved.requests, moved.fetch_s) == (1, b.fetch_s)


def test_launch_time_is_the_analyzers_formula():
    # max over j of (t_1 + ... + t_j + CPU of segments j..m)
    assert segments_launch_time([0.5, 0.3], [0.2, 0.1]) == max(0.5 + 0.3, 0.8 + 0.1)
    assert segments_launch_time([0.1, 0.1], [0.6, 0.1]) == 0.1 + 0.7
    assert segments_launch_time([], []) == 0.0


def test_place_joins_touching_extents_and_splits_at_jumps():
    exts = [Extent(0, 4096, 4096), Extent(4096, 8192, 4096), Extent(8192, 40960, 4096), Extent(16384, 81920, 4096)]
    # bytes 0..12000: the first two extents touch on the device (one run), the third jumps
    assert place(exts, 0, 12000) == [Run(8, 16, 0, 8192), Run(80, 8, 8192, 12000 - 8192)]
    # a run that starts inside a sector is not joined with the next one
    assert place(exts, 1000, 7192) == [Run(9, 7, 1000, 3096), Run(16, 8, 4096, 4096)]
    assert place(exts, 0, 4096, base=2048) == [Run(2048 + 8, 8, 0, 4096)]
    assert place(exts, 12288, 4096) == []                 # a hole: no run

def test_fetch_order_metadata_sweep_then_data_sweep_each_by_device_and_lba():
    f = _file(b"o", 2**20)
    meta = [Range(2, 50, 8, 4096), Range(1, 900, 8, 4096), Range(1, 900, 8, 4096)]   # one read twice
    data = [Range(1, 10, 8, 4096, f, 0), Range(1, 5, 8, 4096, f, 4096), Range(2, 1, 8, 4096, f, 8192)]
    got = fetch_order(data + meta)
    assert [(r.file is None, r.dev, r.sector) for r in got] == \
        [(True, 1, 900), (True, 2, 50), (False, 1, 5), (False, 1, 10), (False, 2, 1)]
    assert [r.sector for r in fetch_order(data + meta, metadata_first=False)] == [5, 10, 900, 1, 50]
