"""Relocation planning and the disk model: pure logic on hand-made schedules (no root needed)."""

from warmstart.model import Range, Schedule, ScheduledFile, Segment
from warmstart.relocate import model, planner

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


def test_model_contiguous_fetch_is_one_request_and_far_cheaper():
    stroke = 2 * 10**9 // 512
    scattered = [(i * 200000, 256) for i in range(100)]
    packed = [(i * 256, 256) for i in range(100)]
    a, b = model.fetch_cost(scattered, stroke), model.fetch_cost(packed, stroke)
    assert (a.requests, a.seeks) == (100, 100)
    assert (b.requests, b.seeks) == (1, 1)
    assert b.seconds < a.seconds / 5


def test_launch_time_pipeline():
    # f1, then max(cpu1, f2), then cpu2
    assert model.launch_time([(0.5, 0.2), (0.3, 0.1)]) == 0.5 + 0.3 + 0.1
    assert model.launch_time([(0.5, 0.4), (0.3, 0.1)]) == 0.5 + 0.4 + 0.1
    assert model.launch_time([]) == 0.0
