"""Helpers for the replayer tests: page-cache residency (cachestat), FIEMAP, schedules in SQL,
their exports and a run of the replayer on one."""

import ctypes
import fcntl
import json
import os
import struct
import subprocess
import sys
import time
from pathlib import Path

from warmstart.db.schedules import load_active_schedule, save_schedule
from warmstart.model import Range, Schedule, ScheduledFile, Segment
from warmstart.replay.export import write_export

_libc = ctypes.CDLL(None, use_errno=True)
_libc.syscall.restype = ctypes.c_long
PAGE = os.sysconf("SC_PAGE_SIZE")
KIB = 1024
REPLAY = Path(__file__).resolve().parent.parent / "build" / "warmstart-replay"


class _Range(ctypes.Structure):
    _fields_ = [("off", ctypes.c_uint64), ("len", ctypes.c_uint64)]


class _Stat(ctypes.Structure):
    _fields_ = [(n, ctypes.c_uint64) for n in ("cache", "dirty", "wb", "ev", "rev")]


def _cachestat(path, offset: int, length: int) -> _Stat:
    fd = os.open(path, os.O_RDONLY)
    try:
        r, s = _Range(offset, length), _Stat()
        if _libc.syscall(451, fd, ctypes.byref(r), ctypes.byref(s), 0) < 0:
            raise OSError(ctypes.get_errno(), "cachestat")
        return s
    finally:
        os.close(fd)


def cached_pages(path, offset: int, length: int) -> int:
    """Pages of [offset, offset+length) of `path` in the page cache, by cachestat(2)."""
    return _cachestat(path, offset, length).cache


def reclaimed_pages(paths) -> int:
    """Pages of these files the kernel's reclaim took since evict() last emptied them: reclaim
    leaves a shadow entry per page (cachestat's nr_evicted), fadvise DONTNEED clears them. Not
    only under memory pressure: a proactive reclaimer (DAMON's pageout scheme runs on this
    machine, kdamond) takes pages a few hundred ms after their last use."""
    return sum(_cachestat(p, 0, 0).ev for p in paths)


def without_reclaim(attempt, paths, tries: int = 3, taken_in=None):
    """attempt() (which starts with evict() of `paths`) until no page of `paths` was reclaimed
    during it, at most `tries` times; its result. A test of exact residency cannot judge a run
    in which the kernel took some of the pages it counts. taken_in(result): the pages reclaimed
    as the run counted them, where a read after the reclaim refaulted them (which removes the
    shadow entries reclaimed_pages counts)."""
    for _ in range(tries):
        got = attempt()
        taken = taken_in(got) if taken_in else reclaimed_pages(paths)
        if not taken:
            return got
        print(f"\nthe kernel reclaimed {taken} pages of the test's files during the run: run again")
    raise AssertionError(f"the kernel reclaimed pages of the test's files in each of {tries} runs "
                         f"({taken} in the last): a test of exact residency cannot judge them")


def evict(path, wait_s: float = 5.0) -> None:
    """Drop one file's (or block device's) clean pages without touching anyone else's cache, and
    see them gone. DONTNEED passes over pages still locked for I/O: an asynchronous fetch that
    is still reading (the replayer's readahead and fadvise engines return before their I/O
    completes) leaves its pages behind, so it is asked again until cachestat counts none. A
    block device is asked once: the file system on it keeps its superblock's buffers."""
    fd = os.open(path, os.O_RDONLY)
    try:
        if str(path).startswith("/dev/"):
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            return
        os.fsync(fd)
        deadline = time.monotonic() + wait_s
        while True:
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            left = _cachestat(path, 0, 0).cache
            if not left:
                return
            if time.monotonic() > deadline:
                raise AssertionError(f"evict({path}): {left} pages still cached after {wait_s} s")
            time.sleep(0.01)
    finally:
        os.close(fd)


def physical_sector(path, offset: int) -> int:
    """The 512-byte sector holding byte `offset` of `path` (FIEMAP)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        hdr = struct.pack("=QQIIII", offset, 1, 1, 0, 1, 0)  # start, length, flags=SYNC, mapped, count
        buf = bytearray(hdr + bytes(56))
        fcntl.ioctl(fd, 0xC020660B, buf)
        logical, physical = struct.unpack_from("=QQ", buf, 32)
        return (physical + offset - logical) // 512
    finally:
        os.close(fd)


def make_app(conn, name: str, argv) -> int:
    import json
    from warmstart.launching import resolve_command   # the recorder stores the resolved executable
    return conn.execute("INSERT INTO apps (name, executable, argv_json, created_at) VALUES (?,?,?,?)",
                        (name, resolve_command(argv), json.dumps(list(argv)), time.time())).lastrowid


def scheduled_file(path) -> ScheduledFile:
    st = os.stat(path)
    return ScheduledFile(os.fsencode(path), st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)


def file_range(sf: ScheduledFile, offset: int, length: int) -> Range:
    sector = physical_sector(sf.path, offset)
    return Range(sf.dev, sector, length // 512, length, sf, offset)


def device_range(dev: int, sector: int, length: int) -> Range:
    return Range(dev, sector, length // 512, length, None, None)


def save(conn, app: str, segments_ranges, files, cpu_s=0.01) -> int:
    """Store a schedule whose segment k holds segments_ranges[k] (kept LBA-sorted, as the analyzer does)."""
    segs, p = [], 1
    for k, rs in enumerate(segments_ranges, start=1):
        rs = sorted(rs, key=lambda r: (r.dev, r.sector))
        segs.append(Segment(k, p, p + len(rs) - 1, 0.01, cpu_s, sum(r.length for r in rs), rs))
        p += len(rs)
    sched = Schedule(None, app, "test", "model", 0.1, sum(s.bytes for s in segs), 0, [], segs, files, {})
    return save_schedule(conn, sched)


def build(conn, files, segments, tmp_path, name="t"):
    """segments: list of lists of (file index, offset KiB, length KiB); returns the export path."""
    make_app(conn, name, [sys.executable])
    sfs = [scheduled_file(p) for p in files]
    segs = [[file_range(sfs[i], o * KIB, n * KIB) for i, o, n in seg] for seg in segments]
    save(conn, name, segs, sfs)
    info = write_export(load_active_schedule(conn, name), tmp_path / f"{name}.wsr")
    return info.path


def run_replayer(export_path, *args):
    """Run the replayer to completion; return (exit status, stats dict, stderr)."""
    r, w = os.pipe()
    proc = subprocess.run([str(REPLAY), "--stats-fd", str(w), *args, os.fsdecode(export_path)],
                          pass_fds=(w,), capture_output=True)
    os.close(w)
    with os.fdopen(r, "rb") as f:
        raw = f.read()
    return proc.returncode, json.loads(raw) if raw.strip() else None, proc.stderr.decode()
