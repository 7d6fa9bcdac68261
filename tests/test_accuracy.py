"""Prefetch accuracy and waste (warmstart/replay/pageuse.py) on real launches, really traced.

The app (build/synthlaunch) reads 64 pages of data.bin; the schedule covers 32 of them plus 32
pages the app never reads. So accuracy = 32/64 and waste = 32/64, by read() and by mmap, with
the pages already in the page cache (hits: only the filemap events that fire on hits see them)
and not (misses).
"""

import os
import subprocess
import sys

import pytest

from conftest import REPO, have_loop, have_tracefs, require
from replay_helpers import cached_pages, evict, file_range, make_app, save, scheduled_file
from warmstart.db import open_db
from warmstart.db.launches import list_launches
from warmstart.recorder.events import parse_lines
from warmstart.replay.pageuse import PAGE, used_pages
from warmstart.replay.runner import LaunchOptions, Prefetch, run_launch

KIB = 1024
SYNTH = REPO / "build" / "synthlaunch"
QUIET = LaunchOptions(passthrough=False)   # the app's output captured, not printed


@pytest.fixture(scope="module")
def disk():
    require(have_loop() and have_tracefs(), "needs root, loop devices and tracefs")
    require(SYNTH.exists() and (REPO / "build" / "warmstart-replay").exists(), "run `make binaries`")
    from warmstart.emudisk import EmuDisk
    d = EmuDisk.up(name=f"pytest-accuracy-{os.getpid()}", profile="hdd7200", image="empty", size_mb=32, fresh=True)
    try:
        (d.mountpoint / "data.bin").write_bytes(os.urandom(1024 * KIB))
        (d.mountpoint / "other.bin").write_bytes(os.urandom(64 * KIB))
        (d.mountpoint / "small.txt").write_bytes(b"y" * 5000)    # 2 pages; `cat` asks for 32
        (d.mountpoint / "big.bin").write_bytes(os.urandom(8192 * KIB))
        os.sync()
        yield d
    finally:
        d.down()


def _app(tmp_path, disk, argv, name="synth"):
    """An app whose schedule covers data.bin [128K, 256K) (used) and [512K, 640K) (never used)."""
    conn = open_db(tmp_path / "db")
    make_app(conn, name, argv)
    sf = scheduled_file(disk.mountpoint / "data.bin")
    save(conn, name, [[file_range(sf, 128 * KIB, 128 * KIB), file_range(sf, 512 * KIB, 128 * KIB)]], [sf])
    return conn


def _prepare(path, cached: bool):
    if cached:
        with open(path, "rb") as f:
            f.read()
        assert cached_pages(path, 0, 1024 * KIB) == 256
    else:
        evict(path)


@pytest.mark.parametrize("access", ["read", "mmap"])
@pytest.mark.parametrize("cached", [False, True], ids=["miss", "hit"])
def test_half_covered_schedule_gives_half_accuracy_and_half_waste(disk, tmp_path, access, cached):
    data = disk.mountpoint / "data.bin"
    argv = [str(SYNTH), f"{access}:{data}:0:{256 * KIB}"]
    conn = _app(tmp_path, disk, argv)
    _prepare(data, cached)
    out = run_launch(conn, argv, Prefetch(measure_use=True), QUIET, name="synth")
    assert out.exit_status == 0 and out.prefetched, out.notes
    pu = out.page_use
    assert pu["lost_events"] == 0 and pu["exact"], pu
    assert pu["used_bytes"] == 64 * PAGE, pu
    assert pu["prefetched_bytes"] == 64 * PAGE
    assert pu["prefetched_used_bytes"] == 32 * PAGE
    assert pu["accuracy"] == pytest.approx(0.5) and pu["waste"] == pytest.approx(0.5)
    row = list_launches(conn)[-1]
    assert (row["used_bytes"], row["prefetched_bytes"], row["prefetched_used_bytes"]) == \
        (64 * PAGE, 64 * PAGE, 32 * PAGE)


@pytest.mark.parametrize("fixture, subvolume", [("emu_xfs", False), ("emu_btrfs", False), ("emu_btrfs", True)],
                         ids=["xfs", "btrfs", "btrfs-subvolume"])
def test_accuracy_on_xfs_and_btrfs_where_the_cache_names_files_by_another_dev(request, tmp_path, fixture, subvolume):
    """btrfs names a file in the page cache by the file system's dev, not its subvolume's st_dev
    (which differs even at the top level): the use tracer's device filter and the prefetched
    pages are keyed as the cache names them (fs.FileSystem.cache_key), else used is 0."""
    require(SYNTH.exists() and (REPO / "build" / "warmstart-replay").exists(), "run `make binaries`")
    emu = request.getfixturevalue(fixture)
    top = emu.mountpoint / f"acc-{os.getpid()}-{request.node.callspec.id}"
    if subvolume:
        subprocess.run(["btrfs", "subvolume", "create", str(top)], check=True, capture_output=True)
    else:
        top.mkdir()
    data = top / "data.bin"
    data.write_bytes(os.urandom(1024 * KIB))
    os.sync()
    conn = open_db(tmp_path / "db")
    argv = [str(SYNTH), f"read:{data}:0:{256 * KIB}"]
    make_app(conn, "synth", argv)
    sf = scheduled_file(data)
    save(conn, "synth", [[file_range(sf, 128 * KIB, 128 * KIB), file_range(sf, 512 * KIB, 128 * KIB)]], [sf])
    evict(data)
    out = run_launch(conn, argv, Prefetch(measure_use=True), QUIET, name="synth")
    assert out.exit_status == 0 and out.prefetched, out.notes
    pu = out.page_use
    assert (pu["used_bytes"], pu["prefetched_bytes"], pu["prefetched_used_bytes"]) == \
        (64 * PAGE, 64 * PAGE, 32 * PAGE), pu


def test_replayer_reads_are_not_use_and_unscheduled_files_are_misses(disk, tmp_path):
    """The pread engine fetches with read() from threads of the replayer, here alongside the app
    (interleave, on the emulated hard disk): those get_pages events are the replayer's, not the
    app's. The app's shell also reads other.bin (16 pages) and small.txt (cat asks for 32 pages
    of a 2-page file: clipped to its size): both unscheduled, so they are misses."""
    mp = disk.mountpoint
    argv = ["/bin/sh", "-c", f"{SYNTH} cpu:400 read:{mp / 'data.bin'}:0:{256 * KIB}"
                             f" read:{mp / 'other.bin'}:0:{64 * KIB} && cat {mp / 'small.txt'} >/dev/null"]
    conn = open_db(tmp_path / "db")
    make_app(conn, "shell", argv)
    sf, big = scheduled_file(mp / "data.bin"), scheduled_file(mp / "big.bin")
    # 8 MiB never used: the replayer is still reading when the app has started
    save(conn, "shell", [[file_range(sf, 128 * KIB, 128 * KIB), file_range(big, 0, 8192 * KIB)]], [sf, big])
    for p in ("data.bin", "other.bin", "small.txt", "big.bin"):
        evict(mp / p)
    out = run_launch(conn, argv, Prefetch("interleave", "pread", measure_use=True), QUIET, name="shell")
    assert out.exit_status == 0 and out.prefetched, out.notes
    st = out.replay_stats
    assert st["bytes_fetched"] == (128 + 8192) * KIB, st      # all of it, by read(), ...
    assert st["t_total_ns"] > (out.launch_time_s - out.app_time_s) * 1e9   # ... ending after the fork
    pu = out.page_use
    assert pu["unscheduled_files"] == 2 and pu["unresolved_files"] == 0, pu
    # every read starts on a miss: one whose first batch went untraced is counted from its
    # readahead (docs/replayer.md, "one batch short")
    assert pu["used_bytes"] == (64 + 16 + 2) * PAGE, pu
    assert pu["unscheduled_used_bytes"] == 18 * PAGE
    assert pu["used_bytes"] - pu["unscheduled_used_bytes"] == 64 * PAGE
    assert pu["prefetched_bytes"] == (32 + 2048) * PAGE and pu["prefetched_used_bytes"] == 32 * PAGE


def test_without_measure_use_nothing_is_traced_or_stored(disk, tmp_path):
    data = disk.mountpoint / "data.bin"
    argv = [str(SYNTH), f"read:{data}:0:{4 * KIB}"]
    conn = _app(tmp_path, disk, argv)
    out = run_launch(conn, argv, Prefetch(), QUIET, name="synth")
    assert out.page_use is None
    row = list_launches(conn)[-1]
    assert row["used_bytes"] is None and row["prefetched_used_bytes"] is None
    assert not [n for n in os.listdir("/sys/kernel/tracing/instances") if n.endswith(f"{os.getpid()}-use")]


def test_report_table_shows_accuracy_and_waste(disk, tmp_path):
    data = disk.mountpoint / "data.bin"
    argv = [str(SYNTH), f"read:{data}:0:{256 * KIB}"]
    conn = _app(tmp_path, disk, argv)
    run_launch(conn, argv, Prefetch(measure_use=True), QUIET, name="synth")
    conn.commit()
    r = subprocess.run([sys.executable, "-m", "warmstart", "--db", str(tmp_path / "db"), "report"],
                       capture_output=True, cwd=REPO, text=True)
    assert r.returncode == 0, r.stderr
    row = next(line for line in r.stdout.splitlines() if line.startswith("synth") and "seg" in line)
    assert row.split()[-4:-2] == ["50%", "50%"], r.stdout


def test_used_pages_follows_the_tree_and_the_window():
    """Pure parsing: events of the launch's descendants count, the runner's own and late ones do not."""
    lines = [
        b"  python3-100 [000] ..... 10.000000: sched_process_fork: comm=python3 pid=100 child_comm=python3 child_pid=200",
        b"  sh-200 [000] ..... 10.001000: sched_process_fork: comm=sh pid=200 child_comm=sh child_pid=201",
        b"  cat-201 [001] ..... 10.002000: mm_filemap_get_pages: dev=7:1 ino=c ofs=0-8191",
        b"  cat-201 [001] ..... 10.003000: mm_filemap_map_pages: dev=7:1 ino=c ofs=16384-24575",
        b"  cat-201 [001] ..... 10.004000: mm_filemap_fault: dev=7:1 ino=d ofs=4096",
        b"  python3-100 [000] ..... 10.005000: mm_filemap_get_pages: dev=7:1 ino=e ofs=0-4095",
        b"  cat-201 [001] ..... 99.000000: mm_filemap_get_pages: dev=7:1 ino=f ofs=0-4095",
    ]
    used, n = used_pages(parse_lines(lines), 200, 10_000_000_000, 11_000_000_000)
    dev = os.makedev(7, 1)
    assert used == {(dev, 0xc): {0, 1, 4, 5}, (dev, 0xd): {1}} and n == 3


def test_a_read_whose_first_batch_went_untraced_is_counted_from_its_readahead():
    """filemap_get_pages skips its tracepoint when the batch's last folio is still under I/O (the
    other folios are copied): a read of pages 0-63 that starts on a miss can be traced only from
    page 1 on. Its sync readahead (same request, same end) gives the start. A fault's readahead
    window (followed by a fault, not by a read ending where it ends) is not use, nor is one
    that no use of the file follows."""
    ra = b"index=%d req_count=%d order=0 size=0 async_size=0 ra_pages=32 mmap_miss=0 prev_pos=-1"
    lines = [
        b"  synth-200 [000] ..... 10.001000: page_cache_sync_ra: dev=7:1 ino=c " + ra % (0, 64),
        b"  synth-200 [000] ..... 10.002000: mm_filemap_get_pages: dev=7:1 ino=c ofs=4096-262143",
        b"  synth-200 [000] ..... 10.003000: page_cache_sync_ra: dev=7:1 ino=d " + ra % (8, 32),
        b"  synth-200 [000] ..... 10.004000: mm_filemap_fault: dev=7:1 ino=d ofs=32768",
        b"  synth-200 [000] ..... 10.005000: page_cache_async_ra: dev=7:1 ino=e " + ra % (4, 32),
        b"  synth-200 [000] ..... 10.006000: mm_filemap_get_pages: dev=7:1 ino=e ofs=0-4095",
        b"  synth-200 [000] ..... 10.007000: page_cache_async_ra: dev=7:1 ino=f " + ra % (0, 16),
        # a fault's two windows, then a fault; a read's sync and async readahead, then its read
        b"  synth-200 [000] ..... 10.008000: page_cache_async_ra: dev=7:1 ino=a " + ra % (40, 32),
        b"  synth-200 [000] ..... 10.008100: page_cache_async_ra: dev=7:1 ino=a " + ra % (72, 32),
        b"  synth-200 [000] ..... 10.008200: mm_filemap_fault: dev=7:1 ino=a ofs=163840",
        b"  synth-200 [000] ..... 10.009000: page_cache_sync_ra: dev=7:1 ino=b " + ra % (0, 8),
        b"  synth-200 [000] ..... 10.009100: page_cache_async_ra: dev=7:1 ino=b " + ra % (4, 4),
        b"  synth-200 [000] ..... 10.009200: mm_filemap_get_pages: dev=7:1 ino=b ofs=24576-32767",
    ]
    used, n = used_pages(parse_lines(lines), 200, 10_000_000_000, 11_000_000_000)
    dev = os.makedev(7, 1)
    assert used == {(dev, 0xc): set(range(64)), (dev, 0xd): {8}, (dev, 0xe): {0},
                    (dev, 0xa): {40}, (dev, 0xb): set(range(8))}, used
    assert n == 8
