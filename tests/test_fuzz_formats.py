"""Hostile input: every reader of a file or stream from outside refuses it cleanly or parses it.

- C readers (.wsr: the replayer, run as root; hook.idx: warmstartd and the preload shim in every
  process): build/fuzz-formats, a seeded structure-aware mutation fuzzer built with ASan and
  UBSan, runs for a fixed budget over the committed corpus and over seeds the current writers
  make now (so a format change cannot leave the fuzzer testing an old format).
- Python readers (.wsched imports, the hook index, tracefs event lines): hypothesis mutates valid
  inputs (checksums recomputed, so mutations get past them). Each input either parses into a
  well-formed value or is refused with WarmstartError naming the file and the fix, the one a user
  sees as a clear line; never another exception. A mutation with the checksums left as they were
  must be refused, the seed itself must parse to what was written.
- Past findings (tests/fuzz/regressions, written by `make_corpus.py --regressions`) are replayed
  with the outcome each must have.
"""

import re
import struct
import subprocess
import sys
import zlib

from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from conftest import REPO, require
from warmstart.errors import WarmstartError

FUZZ = REPO / "build" / "fuzz-formats"
CORPUS = REPO / "tests" / "fuzz" / "corpus"
REGRESSIONS = REPO / "tests" / "fuzz" / "regressions"
BUDGET_S = 8


def test_c_readers_survive_the_fuzzer(tmp_path):
    require(FUZZ.exists(), "run `make binaries` (builds build/fuzz-formats with ASan and UBSan)")
    fresh = tmp_path / "fresh"
    subprocess.run([sys.executable, str(REPO / "tests/fuzz/make_corpus.py"), str(fresh)], check=True)
    crashes = tmp_path / "crashes"
    crashes.mkdir()
    r = subprocess.run([str(FUZZ), "--seconds", str(BUDGET_S), "--crash-dir", str(crashes), str(CORPUS), str(fresh)],
                       capture_output=True, text=True, timeout=BUDGET_S + 120)
    print(r.stdout, r.stderr[-3000:])
    saved = list(crashes.iterdir())
    assert r.returncode == 0 and not saved, f"finding: {[p.name for p in saved]}\n{r.stderr[-3000:]}"
    counts = {m[0]: (int(m[1]), int(m[2])) for m in re.findall(r"(\w+): (\d+) executions, (\d+) accepted", r.stdout)}
    for fmt in ("wsr", "idx"):
        execs, accepted = counts[fmt]
        assert execs > 10_000, counts   # the budget really ran
        assert 0 < accepted < execs, counts  # mutations both pass and fail the checks


def test_committed_corpus_is_of_the_current_formats():
    require(FUZZ.exists(), "run `make binaries`")
    r = subprocess.run([str(FUZZ), "--seconds", "0", str(CORPUS)], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr + "\nregenerate: python3 tests/fuzz/make_corpus.py"


def test_past_findings_stay_fixed():
    """Every past finding is kept (commit 4b043bc: .wsr paths that walk elsewhere, ranges past
    a file's last page, traced numbers past 64 bits): the C ones must get the outcome their name
    says (`fuzz-formats --replay` checks refused-*/parses-*), the tracefs lines must be skipped."""
    require(FUZZ.exists(), "run `make binaries`")
    inputs = sorted(REGRESSIONS.glob("*")) if REGRESSIONS.is_dir() else []
    assert inputs, f"no past findings in {REGRESSIONS}: write them with tests/fuzz/make_corpus.py --regressions"
    binary = [p for p in inputs if p.suffix != ".txt"]
    assert any(p.name.startswith("refused-") for p in binary) and any(p.suffix == ".txt" for p in inputs), inputs
    from warmstart.formats import wsr
    for p in binary:   # of the current format: a refused-* one must be refused for its own defect
        if p.suffix == ".wsr":
            assert wsr.HEADER.unpack(p.read_bytes())["version"] == wsr.VERSION, \
                f"{p.name} is of an older .wsr version: python3 tests/fuzz/make_corpus.py --regressions"
    r = subprocess.run([str(FUZZ), "--replay", *map(str, binary)], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr[-3000:]
    assert re.search(r"wsr: %d executions" % sum(p.suffix == ".wsr" for p in binary), r.stdout), r.stdout
    from warmstart.recorder import events
    for p in inputs:
        if p.suffix != ".txt":
            continue
        for line in p.read_bytes().splitlines():
            name, _, body = line.partition(b" ")
            ev = events.parse_line(b"  python3-1234    [001] d..1.  1234.567890: %s: %s" % (name, body))
            assert ev is not None, line
            assert events.assemble_requests([ev]) == [], line  # no device has these numbers: skipped
            assert events.filemap_pages(ev.body) is None, line


# ---- Python readers ---------------------------------------------------------------------------

def mutations():
    """A list of (position fraction, kind, value) edits applied to a valid input."""
    return st.lists(st.tuples(st.floats(0, 1, exclude_max=True), st.sampled_from("bwqt"),
                              st.integers(0, 2**64 - 1)), min_size=1, max_size=4)


def apply(data: bytes, edits) -> bytearray:
    b = bytearray(data)
    for frac, kind, value in edits:
        at = int(frac * len(b))
        if kind == "t":
            del b[at:]
        else:
            size = {"b": 1, "w": 4, "q": 8}[kind]
            at -= at % size
            if at + size <= len(b):
                b[at:at + size] = (value % (1 << (8 * size))).to_bytes(size, "little")
    return b


def _portable_seed() -> bytes:
    from warmstart.portable.format import PFile, PRange, PSegment, Portable, encode
    files = [PFile(b"/usr/bin/python3", 5_000_000, b"\1" * 32), PFile(b"/usr/lib/libz.so.1", 100_000, b"\2" * 32)]
    segs = [PSegment(1, 1, 3, 0.01, 0.02, [PRange(0, 0, 8192), PRange(1, 4096, 4096)], 0, 0),
            PSegment(2, 4, 9, 0.03, 0.01, [PRange(0, 65536, 16384)], 1, 4096)]
    return encode(Portable("app", b"/usr/bin/python3", [b"python3", b"-c", b"import json"], files, segs, {}))


PORTABLE_SEED = _portable_seed()


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(mutations(), st.booleans())
def test_portable_schedule_reader_refuses_cleanly(edits, fix):
    from warmstart.formats.wsched import HEADER
    from warmstart.portable.format import decode
    b = apply(PORTABLE_SEED, edits)
    if fix and len(b) >= HEADER.size:  # a writer that meant it: checksums recomputed
        h = HEADER.unpack(b)
        h["payload_len"] = len(b) - HEADER.size
        h["payload_crc32"] = zlib.crc32(b[HEADER.size:])
        b[:HEADER.size] = HEADER.pack_crc("header_crc32", **h)
    outcome = _read(decode, b, "portable schedule")
    if bytes(b) == PORTABLE_SEED:
        assert outcome == decode(PORTABLE_SEED)
    elif not fix:
        assert outcome == "refused", "a corrupt .wsched with its old checksums was taken"
    if outcome != "refused":
        assert isinstance(outcome.app_name, str) and isinstance(outcome.executable, bytes), outcome
        assert all(isinstance(a, bytes) for a in outcome.argv) and isinstance(outcome.meta, dict), outcome
        assert all(0 <= r.file_no < len(outcome.files) for s in outcome.segments for r in s.ranges), outcome


def _read(decode, data, what):
    """The reader's value, or "refused" after a WarmstartError that says what to do."""
    try:
        return decode(bytes(data))
    except WarmstartError as e:
        assert what in str(e) and ("export it again" in str(e) or "hook install" in str(e)), str(e)
        return "refused"


def _index_seed() -> bytes:
    from warmstart.hook.index import Index, IndexEntry, encode
    return encode(Index(entries=[IndexEntry(0x801, 12, 100, 5, 1, b"/usr/bin/python3", b"/s/1.wsr", "a",
                                            (b"-c", b"x"), (b"/usr/lib/a.so",)),
                                 IndexEntry(0x801, 13, 100, 5, 2, b"/usr/bin/env", b"/s/2.wsr", "b")]))


INDEX_SEED = _index_seed()


@settings(max_examples=400, deadline=None)
@given(mutations(), st.booleans())
def test_hook_index_reader_refuses_cleanly(edits, fix):
    from warmstart.formats.hook_index import HEADER, fnv1a64
    from warmstart.hook.index import decode
    b = apply(INDEX_SEED, edits)
    if fix and len(b) >= HEADER.size:
        fields = HEADER.unpack(b)
        fields["checksum"] = fnv1a64(bytes(b[HEADER.size:]))
        b[:HEADER.size] = HEADER.pack(**fields)
    outcome = _read(decode, b, "index")
    if bytes(b) == INDEX_SEED:
        assert outcome == decode(INDEX_SEED)
    elif not fix and bytes(b[HEADER.size:]) != INDEX_SEED[HEADER.size:]:
        assert outcome == "refused", "a corrupt index with its old checksum was taken"
    if outcome != "refused":
        assert len(outcome.entries) == HEADER.unpack(b)["n_entries"], outcome
        for e in outcome.entries:
            assert isinstance(e.exe, bytes) and isinstance(e.schedule, bytes) and isinstance(e.name, str), e
            assert all(isinstance(x, bytes) for x in e.needles + e.files), e


TRACE_PREFIX = st.sampled_from([
    b"  python3-1234    [001] d..1.  1234.567890: block_rq_issue: ",
    b"  python3-1234    [001] d..1.  1234.567890: block_bio_queue: ",
    b" kworker/1:1-99   (   99) [000] ..... 77.000001: block_rq_complete: ",
    b"  cat-7 [000] ..... 5.5: mm_filemap_add_to_page_cache: ",
    b"  cat-7 [000] ..... 5.5: mm_filemap_get_pages: ",
    b"  cat-7 [000] ..... 5.5: sched_process_fork: ",
    b"",
])
BIG = st.one_of(st.integers(0, 300), st.integers(0, 2**72))
BODIES = st.one_of(
    st.builds(lambda a, b, rw, n, sec, nr: b"%d,%d %s %d () %d + %d [app]" % (a, b, rw, n, sec, nr),
              BIG, BIG, st.sampled_from([b"R", b"RA", b"WS", b"", b"RM"]), BIG, BIG, BIG),
    st.builds(lambda a, b, rw, sec, nr: b"%d,%d %s () %d + %d [0]" % (a, b, rw, sec, nr),
              BIG, BIG, st.sampled_from([b"R", b"W"]), BIG, BIG),
    st.builds(lambda a, b, ino, ofs, order: b"dev %d:%d ino %x pfn=0x1 ofs=%d order=%d" % (a, b, ino, ofs, order),
              BIG, BIG, BIG, BIG, BIG),
    st.builds(lambda a, b, ino, lo, hi: b"dev=%d:%d ino=%x ofs=%d-%d" % (a, b, ino, lo, hi), BIG, BIG, BIG, BIG, BIG),
    st.builds(lambda c, p, cc, ch: b"comm=%s pid=%d child_comm=%s child_pid=%d" % (c, p, cc, ch),
              st.binary(max_size=16).map(lambda b: b.replace(b"\n", b" ")), BIG,
              st.binary(max_size=16).map(lambda b: b.replace(b"\n", b" ")), BIG),
    st.binary(max_size=80).map(lambda b: b.replace(b"\n", b" ")),  # lines are split on newlines
)
EVENT_NAMES = st.sampled_from([b"block_rq_issue", b"block_bio_queue", b"block_rq_complete",
                               b"mm_filemap_add_to_page_cache", b"mm_filemap_get_pages", b"mm_filemap_fault",
                               b"sched_process_fork", b"sched_process_exec"])


@settings(max_examples=1500, deadline=None)
@example([(b"block_rq_issue", b"99999999999999,0 R 4096 () 123 + 8 [python3]")])  # found: major past 32 bits
@given(st.lists(st.tuples(EVENT_NAMES, BODIES), min_size=1, max_size=6))
def test_trace_line_parsers_never_crash(lines):
    """A line from trace_pipe is the kernel's, but a corrupt or unexpected one (another kernel's
    format, numbers past 64 bits) must not stop a recording: it is skipped."""
    from warmstart.recorder import events, tasks
    evs = [events.parse_line(b"  python3-1234    [001] d..1.  1234.567890: %s: %s" % (name, body))
           for name, body in lines]
    assert all(ev is not None for ev in evs)  # the frame parses: the body is what is tested
    events.assemble_requests(evs)
    for ev in evs:
        events.filemap_pages(ev.body)
        tasks.fork_of(ev)
    tasks.build_tree(evs, 1234, 0, 1 << 62)


def test_wsr_writer_and_reader_agree_on_a_struct_level_seed():
    """The committed seeds come from the writers: a sanity check that the corpus is not empty."""
    names = sorted(p.name for p in CORPUS.iterdir())
    assert any(n.endswith(".wsr") for n in names) and any(n.endswith(".idx") for n in names), names
    assert all(struct.unpack_from("<8s", p.read_bytes())[0] in (b"WSREPLAY", b"WSHOOKIX") for p in CORPUS.iterdir())
