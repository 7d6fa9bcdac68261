#!/usr/bin/env python3
"""Write the fuzzing seeds with the real writers: .wsr (replay/export.py) and hook.idx
(hook/index.py). Run again after a format change: `python3 tests/fuzz/make_corpus.py DIR`.

`--regressions DIR` writes the past findings instead (tests/fuzz/regressions): inputs a reader
once took or choked on, written by the real writer (checksums right, as a writer that meant it).
The name says what the fixed reader must do: `refused-*` refused, `parses-*` accepted (the
boundary beside a finding), `trace-*.txt` tracefs lines the recorder must skip, not crash on."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from warmstart.model import Range, Schedule, ScheduledFile, Segment
from warmstart.hook.index import Index, IndexEntry, encode as encode_index  # noqa: E402
from warmstart.replay.export import encode as encode_wsr  # noqa: E402


def schedule(sid: int, nfiles: int, nsegments: int, per_segment: int) -> Schedule:
    files = [ScheduledFile(b"/usr/lib/x86_64-linux-gnu/lib%d.so.%d" % (i, i), 0x801, 1000 + i,
                           (i + 1) * 65536 + 123, 1_700_000_000_000_000_000 + i, 1_700_000_000_000_000_000)
             for i in range(nfiles)]
    segs, p = [], 1
    for k in range(1, nsegments + 1):
        ranges = []
        for j in range(per_segment):
            f = files[(k * 7 + j) % nfiles]
            off = (j * 3 % 16) * 4096
            ranges.append(Range(0x801, 2048 + k * 100_000 + j * 64, 8, 4096 * (1 + j % 3), f, off, p + j))
        segs.append(Segment(k, p, p + per_segment - 1, 0.01 * k, 0.002 * k, sum(r.length for r in ranges), ranges))
        p += per_segment
    return Schedule(sid, f"app{sid}", "ours", "model", 0.05, sum(s.bytes for s in segs), 0, [1], segs, files, {})


def index(n: int) -> Index:
    entries = []
    for i in range(n):
        entries.append(IndexEntry(
            dev=0x801, ino=500 + i // 2, size=10_000 + i, mtime_ns=1_700_000_000_000_000_000 + i,
            schedule_id=i + 1, exe=b"/usr/bin/python3" if i % 2 else b"/usr/bin/env",
            schedule=b"/var/lib/warmstart/schedules/%d.wsr" % (i + 1), name=f"app{i}",
            needles=(b"-c", b"import json") if i % 2 else (), files=(b"/usr/lib/a.so", b"/usr/lib/b.so")[:i % 3],
            hold_ms=100 + 50 * i, stale=i == 2, launcher=i % 2 == 0 and i > 0))
    return Index(entries=entries)


def _one_file_wsr(path: bytes, size: int = 65659, offset: int = 0, length: int = 4096) -> bytes:
    f = ScheduledFile(path, 0x801, 1000, size, 1_700_000_000_000_000_000, 1_700_000_000_000_000_000)
    seg = Segment(1, 1, 1, 0.01, 0.002, length, [Range(0x801, 2048, length // 512, length, f, offset, 1)])
    return encode_wsr(Schedule(1, "app1", "ours", "model", 0.05, length, 0, [1], [seg], [f], {}))


def findings() -> dict:
    """Commit 4b043bc (issue 17): the .wsr reader (the replayer, run as root) took paths that
    walk elsewhere and ranges past the file's last page; a traced major:minor past 64 bits
    raised OverflowError in the recorder (events.makedev)."""
    out = {f"refused-wsr-path-{tag}.wsr": _one_file_wsr(path) for tag, path in (
        ("relative", b"usr/lib/libz.so.1"), ("dotdot", b"/usr/lib/../../etc/shadow"),
        ("dot", b"/usr/lib/./libz.so.1"), ("double-slash", b"/usr/lib//libz.so.1"),
        ("trailing-slash", b"/usr/lib/libz.so.1/"), ("root-dot", b"/."))}
    out["refused-wsr-range-past-eof.wsr"] = _one_file_wsr(b"/usr/lib/libz.so.1", size=8000, offset=8192)
    out["parses-wsr-range-in-last-partial-page.wsr"] = _one_file_wsr(b"/usr/lib/libz.so.1", size=8000, offset=4096)
    out["trace-major-past-64-bits.txt"] = (
        b"block_rq_issue 99999999999999,0 R 4096 () 123 + 8 [python3]\n"
        b"block_rq_issue 8,0 R 4096 () 184467440737095516160 + 8 [python3]\n"
        b"block_rq_complete 340282366920938463463374607431768211456,1 R () 8 + 8 [0]\n"
        b"mm_filemap_add_to_page_cache dev 18446744073709551616:1 ino 1f pfn=0x1 ofs=0 order=0\n")
    return out


def main(target: Path, seeds=None) -> None:
    target.mkdir(parents=True, exist_ok=True)
    seeds = seeds or {
        "small.wsr": encode_wsr(schedule(1, 1, 1, 2)),
        "segmented.wsr": encode_wsr(schedule(7, 5, 4, 6)),
        "empty.wsr": encode_wsr(schedule(3, 1, 0, 0)),
        "one.idx": encode_index(index(1)),
        "several.idx": encode_index(index(5)),
    }
    for name, data in seeds.items():
        (target / name).write_bytes(data)
    print(f"{len(seeds)} seeds written to {target}")


if __name__ == "__main__":
    if sys.argv[1:2] == ["--regressions"]:
        main(Path(sys.argv[2]) if len(sys.argv) > 2 else Path(__file__).resolve().parent / "regressions", findings())
    else:
        main(Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).resolve().parent / "corpus")
