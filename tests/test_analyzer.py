"""The analyzer on real devices: FIEMAP on ext4, the O_DIRECT probe, end-to-end analysis, bad input."""

import json
import os
import random
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

import pytest

from conftest import REPO, have_loop, require
from warmstart.analyzer import probe
from warmstart.analyzer.analyze import Options, analyze
from warmstart.fiemap import fiemap
from warmstart.db import open_db
from warmstart.db.schedules import load_active_schedule, load_schedule
from warmstart.errors import WarmstartError

PROBE = REPO / "build" / "warmstart-probe"


def _need_probe():
    if not PROBE.exists():
        subprocess.run(["make", "-s", "-C", str(REPO), "build/warmstart-probe"], check=False)
    require(PROBE.exists(), "build/warmstart-probe not built (make binaries)")


@pytest.fixture
def loop_ext4():
    """A 96 MiB ext4 on a plain loop device of our own, mounted; all undone afterwards."""
    require(have_loop() and shutil.which("mkfs.ext4") is not None, "needs root, loop devices and mkfs.ext4")
    work = Path(tempfile.mkdtemp(prefix="ws-analyzer-"))
    img, mnt = work / "img", work / "mnt"
    mnt.mkdir()
    loop = None
    mounted = False
    try:
        with open(img, "wb") as f:
            f.truncate(96 << 20)
        subprocess.run(["mkfs.ext4", "-q", "-F", str(img)], check=True)
        loop = subprocess.run(["losetup", "-f", "--show", "--direct-io=on", str(img)], check=True,
                              capture_output=True, text=True).stdout.strip()
        subprocess.run(["mount", loop, str(mnt)], check=True)
        mounted = True
        yield loop, mnt
    finally:
        if mounted:
            subprocess.run(["umount", str(mnt)], check=False)
        if loop:
            subprocess.run(["losetup", "-d", loop], check=False)
        shutil.rmtree(work, ignore_errors=True)


def _write(path: Path, size: int, seed: int) -> bytes:
    data = random.Random(seed).randbytes(size)
    path.write_bytes(data)
    return data


def test_fiemap_points_at_the_files_bytes_on_the_device(loop_ext4):
    loop, mnt = loop_ext4
    data = _write(mnt / "f.bin", 300_000, 1)
    os.sync()
    exts = fiemap(bytes(mnt / "f.bin"))
    assert exts and sum(e.length for e in exts) >= len(data)
    fd = os.open(loop, os.O_RDONLY)
    try:
        for e in exts:
            n = min(e.length, len(data) - e.logical)
            assert os.pread(fd, n, e.physical) == data[e.logical:e.logical + n]
    finally:
        os.close(fd)


def test_probe_reads_a_loop_device_with_o_direct(loop_ext4):
    _need_probe()
    loop, _ = loop_ext4
    r = probe.run(loop, [(0, 4096), (1 << 20, 65536), (5 << 20, 100)], repeat=2)
    assert r.elapsed_s > 0 and all(t > 0 for t in r.request_s) and len(r.runs_s) == 2
    assert r.bytes == 4096 + 65536 + 4096  # the last range widened to the block size


def test_probe_refuses_what_cannot_do_o_direct():
    _need_probe()
    with pytest.raises(WarmstartError, match="--probe model"):
        probe.check_direct("/proc/self/status")


def test_probe_rejects_ranges_beyond_the_device(loop_ext4):
    _need_probe()
    loop, _ = loop_ext4
    with pytest.raises(WarmstartError, match="beyond the device"):
        probe.run(loop, [(200 << 20, 4096)])


def test_sorted_order_is_faster_than_shuffled_on_the_emulated_hdd(emu_hdd):
    _need_probe()
    size = probe.device_size(emu_hdd.loop_dev)
    rng = random.Random(7)
    ranges = [(rng.randrange(0, size - 65536) // 4096 * 4096, 16384) for _ in range(40)]
    # each list starts with a positioning read at 0 so every run starts from the same place
    shuffled = probe.run(emu_hdd.loop_dev, [(0, 4096)] + ranges)
    ordered = probe.run(emu_hdd.loop_dev, [(0, 4096)] + sorted(ranges), repeat=3)
    assert ordered.elapsed_s < 0.8 * shuffled.elapsed_s, (ordered.elapsed_s, shuffled.elapsed_s)
    # repeatable: the disk model is deterministic up to rotation phase, but FUSE latency is not and
    # the 2 cores are shared with other test runs: measured 2-12% spread under load, so 20% here,
    # between the two fastest of 3 runs (a fresh-clone CI run with one CPU busy had one run 21 %
    # slower than the other two, 0.262/0.267/0.317 s: the FUSE daemon waiting for a CPU)
    runs = sorted(ordered.runs_s)
    assert runs[1] - runs[0] < 0.20 * runs[0], runs


# ---- end-to-end: a recording made of real files, analyzed against the device --------------------

def _record(conn, name, reads, cpu_ns=2_000_000, lost=0, launch_s=1.0, extents=False, uses=None):
    """Store a recording whose block requests are where `reads` [(path, offset, length)] are now
    (with extents: also the files' FIEMAP, as the recorder stores it; with uses [(path, first page,
    pages)]: the pages the launch used, as the recorder's page-use tracing stores them)."""
    conn.execute("INSERT INTO apps (name, executable, argv_json, created_at) VALUES (?,?,?,?)",
                 (name, b"/bin/true", "[]", time.time()))
    app = conn.execute("SELECT id FROM apps WHERE name = ?", (name,)).fetchone()[0]
    rid = conn.execute("INSERT INTO recordings (app_id, started_at, launch_time_s, end_reason, backend,"
                       " cold_method, lost_events, status, cpu_total_s) VALUES (?,?,?,?,?,?,?,?,?)",
                       (app, time.time(), launch_s, "exit", "tracefs", "drop_caches", lost,
                        "lost-events" if lost else "ok", None)).lastrowid
    seq = 0
    files = {}
    for path, off, length in reads:
        st = os.stat(path)
        files[(st.st_dev, st.st_ino)] = (path, st)
        for e in fiemap(path):
            lo, hi = max(off, e.logical), min(off + length, e.logical + e.length)
            if lo >= hi:
                continue
            sector = (e.physical + lo - e.logical) // 512
            conn.execute("INSERT INTO block_requests (recording_id, seq, dev, sector, nr_sectors, rwbs, is_write,"
                         " is_readahead, is_meta, issue_ns, cpu_before_ns) VALUES (?,?,?,?,?,?,?,?,?,?,?)",
                         (rid, seq, st.st_dev, sector, (hi - lo + 511) // 512, "R", 0, 0, 0, seq * 1000, cpu_ns))
            conn.execute("INSERT INTO page_cache_adds (recording_id, seq, t_ns, dev, ino, first_index, nr_pages)"
                         " VALUES (?,?,?,?,?,?,?)", (rid, seq, seq * 1000, st.st_dev, st.st_ino, lo // 4096,
                                                     (hi - 1) // 4096 - lo // 4096 + 1))
            seq += 1
    if uses is not None:
        conn.execute("UPDATE recordings SET env_json = json_set(env_json, '$.used_pages', ?) WHERE id = ?",
                     (sum(n for _, _, n in uses), rid))
        for path, first, n in uses:
            st = os.stat(path)
            conn.execute("INSERT INTO page_uses (recording_id, dev, ino, first_index, nr_pages) VALUES (?,?,?,?,?)",
                         (rid, st.st_dev, st.st_ino, first, n))
    for (dev, ino), (path, st) in files.items():
        exts = json.dumps([[e.logical, e.physical, e.length, e.flags] for e in fiemap(path)]) if extents else None
        conn.execute("INSERT OR IGNORE INTO recording_files (recording_id, dev, ino, path, size, mtime_ns, ctime_ns,"
                     " extents_json) VALUES (?,?,?,?,?,?,?,?)",
                     (rid, dev, ino, bytes(path), st.st_size, st.st_mtime_ns, st.st_ctime_ns, exts))
    return rid


def _files(root: Path, n=12, size=200_000):
    root.mkdir(exist_ok=True)
    out = []
    for i in range(n):
        p = root / f"lib{i}\xff.so".encode("utf-8", "surrogateescape").decode("utf-8", "surrogateescape")
        p = Path(os.fsdecode(bytes(root) + b"/lib%d\xff.so" % i))
        _write(p, size, i)
        out.append(p)
    os.sync()
    return out


def _check_ranges_hold_the_right_bytes(sched, loop):
    fd = os.open(loop, os.O_RDONLY)
    try:
        for seg in sched.segments:
            for r in seg.ranges:
                if r.file is None:
                    continue
                with open(r.file.path, "rb") as f:
                    f.seek(r.file_offset)
                    want = f.read(min(r.length, 65536))
                assert os.pread(fd, len(want), r.sector * 512) == want
    finally:
        os.close(fd)


def test_analyze_with_disk_probes_makes_a_schedule_of_the_right_blocks(emu_hdd, db_path):
    _need_probe()
    files = _files(Path(emu_hdd.mountpoint) / f"an-{os.getpid()}")
    rng = random.Random(3)
    reads = [(bytes(p), rng.randrange(0, 150_000) // 4096 * 4096, 32768) for p in files for _ in range(2)]
    rng.shuffle(reads)
    conn = open_db(db_path)
    _record(conn, "e2e", reads, cpu_ns=3_000_000)
    results = {}
    for algorithm in ("paper", "reorder", "optimal"):
        r = results[algorithm] = analyze(conn, "e2e", Options(probe="disk", algorithm=algorithm))
        assert r["probe"] == "disk" and r["algorithm"] == algorithm
        assert all(t > 0 for t in r["t_disk_s"])
        sched = load_active_schedule(conn, "e2e")
        assert sched.id == r["schedule_id"]
        assert {f.path for f in sched.files} <= {bytes(p) for p in files}
        _check_ranges_hold_the_right_bytes(sched, emu_hdd.loop_dev)
        # every scheduled byte is a byte the launch read (no gap profile: no read-through)
        assert r["waste_bytes"] == 0
        # orig_pos (interleave's order) follows the launch: by it, the reads come in recorded order
        first_read = lambda rg: min(i for i, (p, o, n) in enumerate(reads)  # noqa: E731
                                    if p == rg.file.path and o <= rg.file_offset < o + n)
        by_pos = sorted((rg for s in sched.segments for rg in s.ranges if rg.file), key=lambda rg: rg.orig_pos)
        assert all(rg.orig_pos for rg in by_pos)
        order = [first_read(rg) for rg in by_pos]
        assert order == sorted(order) and len(set(order)) > 10, order
    assert len(load_schedule(conn, results["reorder"]["schedule_id"]).segments) == 1
    # the optimiser saw the paper's split and one segment, so it is not worse on its own cost
    assert r["t_model_s"] <= r["compare"]["paper"]["t_model_s"] + 1e-9
    assert r["t_model_s"] <= r["compare"]["reorder"]["t_model_s"] + 1e-9


def test_deleted_files_are_skipped_and_never_scheduled(loop_ext4, db_path):
    loop, mnt = loop_ext4
    files = _files(mnt / "d", n=6)
    reads = [(bytes(p), 0, 65536) for p in files]
    conn = open_db(db_path)
    _record(conn, "del", reads)
    gone = files[2]
    old = {(e.physical // 512, e.length // 512) for e in fiemap(bytes(gone))}
    gone.unlink()
    _write(mnt / "d" / "newcomer", 400_000, 99)  # may reuse the freed blocks
    os.sync()
    r = analyze(conn, "del", Options(probe="model" if False else "disk", algorithm="paper")) \
        if PROBE.exists() else None
    require(r is not None, "build/warmstart-probe not built")
    assert r["filemap"]["skipped_files"] == 1
    sched = load_active_schedule(conn, "del")
    assert bytes(gone) not in {f.path for f in sched.files}
    for seg in sched.segments:
        for rg in seg.ranges:
            assert rg.file is None or rg.file.path != bytes(gone)
            if rg.file is None:  # only metadata of the files still there (ext4meta), never the gone data
                for s, n in old:
                    assert rg.sector + rg.nr_sectors <= s or s + n <= rg.sector, \
                        "a block-device range covers the deleted file's old blocks"
    _check_ranges_hold_the_right_bytes(sched, loop)


def _move_data(path: bytes) -> None:
    """Give the file new blocks with ext4's atomic extent move, as `warmstart relocate` does."""
    from warmstart.relocate.moveext import move_extent
    size = os.stat(path).st_size
    nblocks = -(-size // 4096)
    donor = os.open(os.path.dirname(path), os.O_TMPFILE | os.O_RDWR, 0o600)
    fd = os.open(path, os.O_RDWR)
    try:
        os.posix_fallocate(donor, 0, nblocks * 4096)
        assert move_extent(fd, donor, 0, 0, nblocks, path) == nblocks
    finally:
        os.close(fd)
        os.close(donor)


def test_data_moved_after_recording_is_mapped_through_the_recorded_extents(loop_ext4, db_path):
    """After an extent move, the recorded LBAs hold another file's (or no) data: the recorded FIEMAP
    maps them to file bytes, which are then fetched from where they are now."""
    _need_probe()
    loop, mnt = loop_ext4
    files = _files(mnt / "m", n=4)
    reads = [(bytes(p), 0, 65536) for p in files]
    conn = open_db(db_path)
    _record(conn, "moved", reads, extents=True)
    before = {p: [(e.physical, e.length) for e in fiemap(bytes(p))] for p in files}
    for p in files[:2]:
        _move_data(bytes(p))
    os.sync()
    assert all([(e.physical, e.length) for e in fiemap(bytes(p))] != before[p] for p in files[:2])
    r = analyze(conn, "moved", Options(probe="disk", algorithm="reorder"))
    assert r["filemap"]["moved_files"] == 2
    sched = load_active_schedule(conn, "moved")
    got = {}
    for seg in sched.segments:
        for rg in seg.ranges:
            if rg.file is not None:
                got[rg.file.path] = got.get(rg.file.path, 0) + rg.length
    assert got == {bytes(p): 65536 for p in files}, got
    _check_ranges_hold_the_right_bytes(sched, loop)


def test_only_used_pages_are_fetched_unless_keep_unused(loop_ext4, db_path):
    """The cold launch read 64 KiB of each file (readahead); it used pages 0-3 and 9 of the first
    two files and none of the third: the schedule holds exactly those pages."""
    _need_probe()
    loop, mnt = loop_ext4
    files = [bytes(p) for p in _files(mnt / "u", n=3)]
    conn = open_db(db_path)
    _record(conn, "trim", [(p, 0, 65536) for p in files],
            uses=[(files[0], 0, 4), (files[0], 9, 1), (files[1], 0, 4), (files[1], 9, 1), (files[1], 40, 2)])
    r = analyze(conn, "trim", Options(probe="disk", algorithm="reorder"))
    got = {}
    for seg in load_active_schedule(conn, "trim").segments:
        for rg in seg.ranges:
            if rg.file is not None:
                got.setdefault(rg.file.path, []).append((rg.file_offset, rg.length))
    want = [(0, 4 * 4096), (9 * 4096, 4096)]   # page 40 was used but never read: not fetched
    assert {p: sorted(v) for p, v in got.items()} == {files[0]: want, files[1]: want}, got
    assert r["filemap"]["unused_bytes"] == 3 * 65536 - 2 * 5 * 4096
    _check_ranges_hold_the_right_bytes(load_active_schedule(conn, "trim"), loop)
    analyze(conn, "trim", Options(probe="disk", algorithm="reorder", trim_unused=False))
    kept = {rg.file.path: rg.length for seg in load_active_schedule(conn, "trim").segments
            for rg in seg.ranges if rg.file is not None}
    assert kept == {p: 65536 for p in files}


def test_recording_with_lost_events_is_refused_unless_allowed(loop_ext4, db_path):
    _need_probe()
    loop, mnt = loop_ext4
    files = _files(mnt / "l", n=3)
    conn = open_db(db_path)
    _record(conn, "lossy", [(bytes(p), 0, 8192) for p in files], lost=5)
    with pytest.raises(WarmstartError, match="--allow-lost"):
        analyze(conn, "lossy", Options(probe="disk"))
    r = analyze(conn, "lossy", Options(probe="disk", allow_lost=True))
    assert r["lossy_recordings"] and r["schedule_id"]


def test_unknown_app_is_a_clear_error(db_path):
    with pytest.raises(WarmstartError, match="record it first"):
        analyze(open_db(db_path), "no-such-app")


def test_model_probe_without_profile_says_how_to_make_one(loop_ext4, db_path):
    loop, mnt = loop_ext4
    files = _files(mnt / "m", n=2)
    conn = open_db(db_path)
    _record(conn, "noprof", [(bytes(p), 0, 8192) for p in files])
    with pytest.raises(WarmstartError, match="profile-disk"):
        analyze(conn, "noprof", Options(probe="model"))
