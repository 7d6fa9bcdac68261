"""Pure logic of the fallback mechanisms: pattern recognition, competitive depth, feedback,
ELF/ld.so.cache parsing, chroot argv splitting. Plus pre-resolution checked against ld.so."""

import os
import shutil
import subprocess

import pytest

from conftest import require
from warmstart.speculate.online import (JUDGE_MIN_PAGES, SLOW_START_PAGES, OnlinePrefetcher, classify,
                                        competitive_depth_pages, merge_runs)
from warmstart.speculate.preresolve import Elf, launch_files, read_ld_cache, resolve_in_root
from warmstart.speculate.sandbox import split_chroot
from warmstart.recorder.events import parse_lines
from warmstart.speculate.tracer import PageEvent, Tracer, page_events


def ev(first, n=1, kind="miss", key=(7, 42)):
    return PageEvent(0.0, 1, kind, key[0], key[1], first, n)


def test_merge_runs_joins_contiguous_pages():
    assert merge_runs([ev(0, 4), ev(4, 4), ev(20, 1), ev(21, 2)]) == [(0, 8), (20, 3)]


@pytest.mark.parametrize("runs,pattern", [
    ([(0, 4), (4, 4), (8, 4), (12, 4)], "sequential"),
    ([(40, 4), (36, 4), (32, 4), (28, 4)], "reverse"),
    ([(0, 2), (10, 2), (20, 2), (30, 2), (40, 2)], "strided"),
])
def test_classify_recognises_patterns(runs, pattern):
    got, share, _ = classify(runs)
    assert got == pattern and share >= 0.6


def test_classify_random_is_below_threshold():
    _, share, _ = classify([(100, 1), (7, 1), (350, 1), (42, 1), (990, 1)])
    assert share < 0.6


def test_competitive_depth_is_switch_time_times_rate():
    # 12.7 ms x 130 MB/s = 1.65 MB = 403 pages (Li et al.: depth = C_switch x R_tr)
    assert competitive_depth_pages(0.0127, 130e6) == 403
    assert competitive_depth_pages(0.0001, 1e6) == SLOW_START_PAGES  # never below slow start


def test_online_prefetcher_slow_start_then_competitive_depth(tmp_path):
    f = tmp_path / "data"
    f.write_bytes(b"x" * (64 << 20))
    fd = os.open(f, os.O_RDONLY)
    try:
        p = OnlinePrefetcher(lambda key: fd, c_switch_s=0.0127, r_tr_bps=130e6)
        p.step([ev(i * 4, 4) for i in range(4)])  # one linear interval: kernel readahead, not yet ours
        assert p.issued_pages == 0 and not p.streams
        depths, pos = [], 16
        for _ in range(8):
            p.step([ev(pos + i * 4, 4) for i in range(4)])  # 16 sequential pages per interval
            pos += 16
            depths.append(p.streams[(7, 42)].depth)
        assert depths[0] == SLOW_START_PAGES
        assert depths[1] == 2 * SLOW_START_PAGES  # doubling: slow start
        assert max(depths) <= int(p.S * p.depth_max) and max(depths) > SLOW_START_PAGES * 4
        assert p.issued_pages > 0
        # nothing prefetched for a random stream
        q = OnlinePrefetcher(lambda key: fd)
        q.step([ev(x) for x in (100, 7, 350, 42, 990)])
        assert q.issued_pages == 0
    finally:
        os.close(fd)


def test_feedback_raises_aggressiveness_on_linear_misses(tmp_path):
    f = tmp_path / "data"
    f.write_bytes(b"x" * (8 << 20))
    fd = os.open(f, os.O_RDONLY)
    try:
        p = OnlinePrefetcher(lambda key: fd)
        p.step([ev(0, 4), ev(4, 4), ev(8, 4)])
        p.step([ev(12, 4), ev(16, 4), ev(20, 4)])
        window = sorted(p.prefetched[(7, 42)])
        p.step([ev(window[0], 4), ev(window[0] + 4, 4)])  # misses inside what we prefetched
        assert p.S > 1.0 and p.history
    finally:
        os.close(fd)


def test_parse_trace_lines():
    evs = parse_lines([
        b"  python3-1234  [001] ..... 12.5: mm_filemap_add_to_page_cache: dev 7:3 ino 1a pfn=0x1234 ofs=8192 order=2",
        b" sh-9 [000] ..... 13.0: sched_process_fork: comm=sh pid=9 child_comm=sh child_pid=10",
        b" sh-10 [000] ..... 13.5: mm_filemap_get_pages: dev=8:1 ino=ff ofs=4096-16383"])
    miss, read = page_events(evs)
    assert (miss.kind, miss.dev, miss.ino, miss.first, miss.npages, miss.pid) == ("miss", os.makedev(7, 3), 0x1a, 2, 4, 1234)
    assert (read.kind, read.first, read.npages, read.pid, read.t) == ("read", 1, 3, 10, 13.5)
    tracer = Tracer()
    tracer.forks.add(evs)
    assert tracer.tree(9) == {9, 10} and tracer.tree(1234) == {1234}


def test_split_chroot_of_emulated_disk_argv():
    root, env, cmd, clear = split_chroot(["env", "-i", "PATH=/usr/bin", "HOME=/tmp", "chroot", "/mnt/x", "python3", "-c", "1"])
    assert (root, env, cmd, clear) == (b"/mnt/x", {b"PATH": b"/usr/bin", b"HOME": b"/tmp"}, [b"python3", b"-c", b"1"], True)
    assert split_chroot(["python3", "-V"]) == (b"/", {}, [b"python3", b"-V"], False)


def test_resolve_in_root_keeps_absolute_symlinks_inside(tmp_path):
    (tmp_path / "usr" / "lib").mkdir(parents=True)
    (tmp_path / "usr" / "lib" / "libx.so").write_bytes(b"x")
    os.symlink("/usr/lib", tmp_path / "lib")  # absolute: must resolve inside tmp_path, not the host
    got = resolve_in_root(os.fsencode(tmp_path), b"/lib/libx.so")
    assert got == os.fsencode(tmp_path / "usr" / "lib" / "libx.so")
    assert resolve_in_root(os.fsencode(tmp_path), b"/lib/../../../etc/passwd") is None


@pytest.mark.parametrize("prog", ["python3", "gcc", "ls", "bash"])
def test_preresolution_matches_the_dynamic_loader(prog):
    exe = shutil.which(prog)
    require(exe is not None, f"{prog} not installed")
    # ld.so itself lists what it loads (LD_TRACE_LOADED_OBJECTS is what ldd uses)
    out = subprocess.run([exe], env={"LD_TRACE_LOADED_OBJECTS": "1"}, capture_output=True).stdout
    want = {os.path.realpath(l.split(b"=>")[1].split()[0]) for l in out.splitlines() if b"=> /" in l}
    got = {os.path.realpath(p) for p in launch_files([os.fsencode(prog)], b"/", {b"PATH": os.fsencode(os.path.dirname(exe))})}
    assert want and want <= got, (want - got)


def _bytes_read() -> int:
    with open("/proc/self/io") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("rchar:"))


def test_elf_facts_come_from_the_headers_not_the_whole_file(tmp_path):
    """A 64 MiB executable costs pre-resolution its headers and dynamic strings, not 64 MiB of
    reads of a launch it is meant to speed up."""
    big = tmp_path / "big"
    big.write_bytes(open(shutil.which("ls"), "rb").read())
    with open(big, "ab") as f:
        f.truncate(64 << 20)          # a sparse tail after the section headers
    before = _bytes_read()
    with open(big, "rb") as f:
        elf = Elf(f)
    assert _bytes_read() - before < 1 << 20
    assert elf.interp and elf.interp.startswith(b"/") and b"libc.so.6" in elf.needed


def test_an_interpreter_longer_than_any_path_is_refused_unread(tmp_path):
    """PT_INTERP names a path: one claiming 64 MiB is refused, not read into memory."""
    import struct
    data = bytearray(open(shutil.which("ls"), "rb").read())
    phoff, = struct.unpack_from("<Q", data, 0x20)
    phentsize, phnum = struct.unpack_from("<HH", data, 0x36)
    interp = next(phoff + i * phentsize for i in range(phnum)
                  if struct.unpack_from("<I", data, phoff + i * phentsize)[0] == 3)   # PT_INTERP
    struct.pack_into("<Q", data, interp + 32, 64 << 20)                            # its p_filesz
    big = tmp_path / "big"
    big.write_bytes(data)
    with open(big, "ab") as f:
        f.truncate(80 << 20)
    before = _bytes_read()
    with open(big, "rb") as f, pytest.raises(ValueError, match="PT_INTERP"):
        Elf(f)
    assert _bytes_read() - before < 1 << 20


def test_not_an_elf_file_is_a_value_error(tmp_path):
    for content in (b"", b"#!/bin/sh\n", b"\x7fELF" + bytes(60), open(shutil.which("ls"), "rb").read()[:200]):
        (tmp_path / "x").write_bytes(content)
        with open(tmp_path / "x", "rb") as f, pytest.raises(ValueError):
            Elf(f)


def test_ld_cache_is_read_through_ldconfig(tmp_path):
    cache = read_ld_cache(b"/etc/ld.so.cache")
    assert os.path.realpath(cache[b"libc.so.6"]) == os.path.realpath(b"/lib/x86_64-linux-gnu/libc.so.6")
    assert read_ld_cache(os.fsencode(tmp_path / "missing")) == {}


def test_cost_benefit_switches_prefetching_off_when_unused(tmp_path):
    f = tmp_path / "data"
    f.write_bytes(b"x" * (8 << 20))
    fd = os.open(f, os.O_RDONLY)
    try:
        p = OnlinePrefetcher(lambda key: fd)
        # two short sequential bursts, then the launch goes elsewhere: the prefetch is never used
        for start in (0, 500, 1000, 1500, 2000):
            p.step([ev(start, 4), ev(start + 4, 4), ev(start + 8, 4)])
        issued = p.issued_pages
        assert issued >= JUDGE_MIN_PAGES and p.off_reason is None
        for _ in range(5):
            p.step([ev(3000 + 7 * _, 1, kind="read")])
        assert p.off_reason is not None and p.judged_used == 0
        p.step([ev(4000, 4), ev(4004, 4), ev(4008, 4)])   # a new stream: no longer prefetched
        assert p.issued_pages == issued
        # ... but prefetches the launch uses keep it on
        q = OnlinePrefetcher(lambda key: fd)
        q.step([ev(0, 4), ev(4, 4), ev(8, 4)])
        q.step([ev(12, 4), ev(16, 4), ev(20, 4)])
        ahead = sorted(q.prefetched[(7, 42)])
        for i in range(5):
            q.step([ev(ahead[0] + 4 * i, 4, kind="read")] if i == 0 else
                   [ev(a, 1, kind="read") for a in ahead])
        assert q.off_reason is None and q.judged_used == q.judged_pages > 0
    finally:
        os.close(fd)


def test_mapped_files_are_left_to_the_kernel(tmp_path):
    f = tmp_path / "data"
    f.write_bytes(b"x" * (8 << 20))
    fd = os.open(f, os.O_RDONLY)
    try:
        p = OnlinePrefetcher(lambda key: fd)
        for start in (0, 64, 128):   # fault read-around: linear-looking misses after each fault
            p.step([ev(start + 8, 1, kind="fault"), ev(start, 16), ev(start + 16, 16)])
        assert p.issued_pages == 0 and (7, 42) in p.mapped
    finally:
        os.close(fd)


def test_the_online_prefetcher_finds_a_btrfs_file_by_its_page_cache_name(emu_btrfs):
    """The page cache names a btrfs file by the file system's dev, which is not its st_dev: the
    fallback's file finder matches the name the events carry (else nothing is prefetched there)."""
    import subprocess
    import sys
    from warmstart.fs import FileSystems
    from warmstart.speculate.fallback import FileFinder
    p = emu_btrfs.mountpoint / f"finder-{os.getpid()}"
    p.write_bytes(b"x" * 8192)
    st = os.stat(p)
    key = FileSystems().key_and_real(os.fsencode(p))[0]
    assert key != (st.st_dev, st.st_ino)
    app = subprocess.Popen([sys.executable, "-c", "import sys, time; f = open(sys.argv[1], 'rb'); "
                            "print(flush=True); time.sleep(60)", str(p)], stdout=subprocess.PIPE)
    try:
        app.stdout.readline()   # the file is open
        finder = FileFinder()
        finder.app_pid = app.pid
        fd = finder(key)
        assert fd is not None and os.fstat(fd).st_ino == st.st_ino
        finder.close()
    finally:
        app.kill()
        app.wait()
        p.unlink()
