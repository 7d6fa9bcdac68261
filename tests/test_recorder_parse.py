"""Recorder logic without the kernel: parsers, backend agreement, c_i arithmetic, --until."""

import os
from pathlib import Path

import pytest

from warmstart.errors import WarmstartError
from warmstart.launching import launch, parse_until
from warmstart.recorder.blktrace import parse_blkparse
from warmstart.recorder.cputime import CpuCurve, assign_cpu
from warmstart.recorder.events import assemble_requests, parse_lines
from warmstart.model import BlockRequest
from warmstart.fs import lookup_parsers
from warmstart.recorder.attribution import lookups, page_uses
from warmstart.recorder.tasks import build_tree

FIX = Path(__file__).parent / "recorder_fixtures"


def test_blktrace_and_tracefs_parsers_agree():
    """The same four requests as blkparse prints them and as the tracepoints print them: a
    readahead, a metadata read, two bios merged into one request issued by kblockd's kworker
    (submitter = the thread that queued the first bio), and a journal write."""
    bt = assemble_requests(parse_blkparse(FIX.joinpath("blkparse.txt").read_bytes().splitlines()))
    tf = assemble_requests(parse_lines(FIX.joinpath("tracefs.txt").read_bytes().splitlines()))
    assert [r.key() for r in bt] == [r.key() for r in tf]
    assert [(r.sector, r.nr_sectors, r.rwbs, r.tid) for r in tf] == [
        (266240, 128, "RA", 4242), (1058, 8, "RM", 4242), (303104, 16, "R", 4243), (530432, 24, "WS", 91)]
    assert tf[0].dev == os.makedev(7, 2) and tf[3].is_write and tf[1].is_meta and tf[0].is_readahead
    assert tf[2].comm == "synthlaunch" and tf[2].pid == 4242  # tgid from record-tgid
    # times agree once aligned on the first event (blkparse's are relative to it)
    base = tf[0].queue_ns
    for a, b in zip(bt, tf):
        for f in ("queue_ns", "issue_ns", "complete_ns"):
            assert getattr(a, f) + base == getattr(b, f), f


def test_line_parser_handles_odd_comms_and_no_tgid():
    lines = [b"  my prog-x-77 [001] .....  12.000001: sched_process_exit: comm=a pid=77 prio=120 group_dead=true",
             b"  tool-9 (      9) [000] d..2.  3.5: sched_switch: prev_comm=a prev_pid=9 prev_prio=1 "
             b"prev_state=S ==> next_comm=b next_pid=0 next_prio=1",
             b"# comment", b"garbage line"]
    ev = parse_lines(lines)
    assert [(e.comm, e.tid, e.tgid, e.cpu, e.ts_ns) for e in ev] == [
        ("my prog-x", 77, None, 1, 12_000_001_000), ("tool", 9, 9, 0, 3_500_000_000)]


def _ran(t, cpu, tid, ms_ran):
    """A sched_stat_runtime line: tid was charged ms_ran up to t (ns)."""
    return (f"  x-{tid} ({tid:>7}) [{cpu:03d}] d..2.  {t // 10**9}.{t % 10**9 // 1000:06d}: sched_stat_runtime: "
            f"comm=x pid={tid} runtime={ms_ran * 1_000_000} [ns]").encode()


def test_cpu_time_of_a_multithreaded_tree_and_c_i():
    ms = 1_000_000
    fork = b"  p-100 (    100) [000] .....  0.000001: sched_process_fork: comm=p pid=100 child_comm=p child_pid=101"
    odd = b"  p-100 (    100) [000] d..2.  0.099000: sched_stat_runtime: comm=pid=555 pid=555 runtime=5000 [ns]"
    lines = [fork,
             _ran(14 * ms, 0, 100, 4), _ran(30 * ms, 0, 100, 16),          # root: 10..30 ms on cpu0
             _ran(40 * ms, 1, 101, 20),                                     # thread: 20..40 ms on cpu1
             _ran(60 * ms, 1, 555, 10), odd]                                # not in the tree
    events = sorted(parse_lines(lines), key=lambda e: e.ts_ns)
    tree = build_tree(events, root=100, start_ns=0, end_ns=100 * ms)
    assert tree.tids == {100, 101}
    curve = CpuCurve(tree.intervals)
    assert curve(100 * ms) == 40 * ms and curve(25 * ms) == 15 * ms + 5 * ms
    reqs = [BlockRequest(dev=1, sector=0, nr_sectors=8, rwbs="R", issue_ns=5 * ms, complete_ns=15 * ms),
            BlockRequest(dev=1, sector=8, nr_sectors=8, rwbs="R", issue_ns=25 * ms, complete_ns=45 * ms),
            BlockRequest(dev=1, sector=16, nr_sectors=8, rwbs="R", issue_ns=35 * ms, complete_ns=38 * ms)]
    tail = assign_cpu(reqs, curve, 0, 100 * ms)
    # c_1: nothing ran before 5 ms; c_2: 15..25 ms = root 10 + thread 5; c_3: p_2 still in flight -> 0
    assert [r.cpu_before_ns for r in reqs] == [0, 15 * ms, 0]
    assert tail == 2 * ms  # 38..40 ms: only the thread still runs (the root stopped at 30 ms)


def test_page_uses_merge_reads_faults_and_readahead_requests_of_the_tree():
    def line(tid, t, event, body):
        return f"  p-{tid} ({tid:>7}) [000] .....  0.{t:06d}: {event}: {body}".encode()
    lines = [b"  p-100 (    100) [000] .....  0.000001: sched_process_fork: comm=p pid=100 child_comm=p child_pid=101",
             # a read() of pages 0-3 whose get_pages missed pages 0-1 (the early return): sync_ra has them
             line(100, 10, "page_cache_sync_ra", "dev=7:3 ino=2a index=0 req_count=4 order=0 size=8 async_size=4 "
                  "ra_pages=32 mmap_miss=0 prev_pos=-1"),
             line(100, 11, "mm_filemap_get_pages", "dev=7:3 ino=2a ofs=8192-16383"),
             line(101, 12, "mm_filemap_fault", "dev=7:3 ino=2a ofs=40960"),                # page 10
             line(101, 13, "mm_filemap_map_pages", "dev=7:3 ino=2b ofs=0-65535"),          # pages 0-15
             line(555, 14, "mm_filemap_get_pages", "dev=7:3 ino=2a ofs=0-1048575"),        # not the tree
             line(100, 99, "mm_filemap_fault", "dev=7:3 ino=2a ofs=81920")]                # after the end
    events = sorted(parse_lines(lines), key=lambda e: e.ts_ns)
    tree = build_tree(events, root=100, start_ns=0, end_ns=50_000)
    got = [(u.ino, u.first_index, u.nr_pages) for u in page_uses(events, tree, 0, 50_000)]
    assert got == [(0x2a, 0, 4), (0x2a, 10, 1), (0x2b, 0, 16)]


def test_lookups_of_the_tree_once_each_in_order_with_odd_names():
    """xfs_lookup lines of the tree's tasks in the window, each (dev, directory, name) once; a name
    with spaces, bytes that are not UTF-8 or ending in "name " stays whole; others' lookups, a
    name with "/" (no component), an empty name and those after the end are dropped."""
    def line(tid, t, body: bytes):
        return f"  p-{tid} ({tid:>7}) [000] .....  0.{t:06d}: xfs_lookup: ".encode() + body
    lines = [b"  p-100 (    100) [000] .....  0.000001: sched_process_fork: comm=p pid=100 child_comm=p child_pid=101",
             line(100, 10, b"dev 7:0 dp ino 0x80 name usr"),
             line(101, 11, b"dev 7:0 dp ino 0x83 name a b\xff name "),
             line(100, 12, b"dev 7:0 dp ino 0x80 name usr"),            # again: once
             line(101, 13, b"dev 259:1 dp ino 0x1f2 name .gitattributes"),
             line(555, 14, b"dev 7:0 dp ino 0x80 name etc"),            # not the tree
             line(100, 15, b"dev 7:0 dp ino 0x80 name a/b"),
             line(100, 16, b"dev 7:0 dp ino 0x80 name "),
             line(100, 99, b"dev 7:0 dp ino 0x80 name late")]            # after the end
    events = sorted(parse_lines(lines), key=lambda e: e.ts_ns)
    tree = build_tree(events, root=100, start_ns=0, end_ns=50_000)
    assert lookups(events, tree, 0, 50_000, lookup_parsers()) == [
        (os.makedev(7, 0), 0x80, b"usr"), (os.makedev(7, 0), 0x83, b"a b\xff name "),
        (os.makedev(259, 1), 0x1f2, b".gitattributes")]


@pytest.mark.parametrize("spec,kind", [("exit", "exit"), ("idle=1.5", "idle"), ("stdout=^ready", "stdout"),
                                       ("file=/tmp/x", "file")])
def test_parse_until(spec, kind):
    assert parse_until(spec).kind == kind and str(parse_until(spec)) == spec


@pytest.mark.parametrize("spec", ["idle", "idle=x", "idle=-1", "stdout=(", "wait=3", "file="])
def test_parse_until_rejects(spec):
    with pytest.raises(WarmstartError, match="--until"):
        parse_until(spec)


def test_launch_ends(tmp_path):
    r = launch(["sh", "-c", "echo one; sleep 0.2; echo ready; sleep 30"], parse_until("stdout=^ready$"),
               timeout=10, passthrough=False)
    assert r.end_reason == "stdout" and 0.15 < r.launch_time_s < 2 and r.exit_status is None
    assert r.output == b"one\nready\n"
    flag = tmp_path / "up"
    r = launch(["sh", "-c", f"sleep 0.2; touch {flag}; sleep 30"], parse_until(f"file={flag}"), timeout=10)
    assert r.end_reason == "file" and 0.15 < r.launch_time_s < 2
    r = launch(["sh", "-c", "exit 7"], timeout=10, passthrough=False)
    assert (r.end_reason, r.exit_status) == ("exit", 7)
    r = launch(["sleep", "30"], timeout=0.3)
    assert r.end_reason == "timeout" and r.exit_status is None
    with pytest.raises(WarmstartError, match="command not found"):
        launch(["no-such-command-wsrec"])
