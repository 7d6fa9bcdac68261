"""Relocation on a real ext4 file system on a loop device: moves, refusals, dry run, crash safety.

Each test builds its own small ext4 image (tmp_path, unique loop device), fragments files on it,
stores hand-made schedules that read them, and undoes mount and loop device even on failure.
"""

import hashlib
import json
import os
import random
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import REPO, have_loop, have_root, require
from warmstart.db import open_db
from warmstart.db.schedules import load_active_schedule, save_schedule
from warmstart.model import Range, Schedule, ScheduledFile, Segment
from warmstart.errors import WarmstartError
from warmstart.relocate import relocate_apps
from warmstart.fiemap import fiemap_fd as fiemap


def _run(*argv):
    return subprocess.run(argv, check=True, capture_output=True, text=True).stdout.strip()


class Ext4:
    def __init__(self, loop: str, mnt: Path):
        self.loop, self.mnt = loop, mnt
        self.dev = os.stat(mnt).st_dev


@pytest.fixture
def ext4(tmp_path):
    require(have_root() and have_loop(), "needs root and loop devices")
    img, mnt = tmp_path / "reloc.img", tmp_path / "mnt"
    with open(img, "wb") as f:
        f.truncate(192 << 20)
    _run("mkfs.ext4", "-q", "-F", "-b", "4096", "-L", "wsreloc-test", str(img))
    loop = _run("losetup", "-f", "--show", str(img))
    mounted = False
    try:
        mnt.mkdir()
        _run("mount", "-t", "ext4", loop, str(mnt))
        mounted = True
        yield Ext4(loop, mnt)
    finally:
        if mounted:
            subprocess.run(["umount", str(mnt)], check=False)
        subprocess.run(["losetup", "-d", loop], check=False)


def make_fragmented(mnt: Path, names, chunks=8, chunk=64 << 10, seed=1):
    """Files written round-robin a chunk at a time (closed in between, so ext4 drops each file's
    preallocation): each file ends up in several extents interleaved with the others."""
    rng = random.Random(seed)
    paths = [bytes(mnt / n) for n in names]
    for _ in range(chunks):
        for p in paths:
            with open(p, "ab") as f:
                f.write(rng.randbytes(chunk))
                f.flush()
                os.fsync(f.fileno())
    return paths


def extents_of(path: bytes):
    fd = os.open(path, os.O_RDONLY)
    try:
        return fiemap(fd)
    finally:
        os.close(fd)


def sha(path: bytes, from_disk=True) -> str:
    fd = os.open(path, os.O_RDONLY)
    try:
        if from_disk:   # evict this file's pages so the hash reads what is on the disk
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        h = hashlib.sha256()
        while True:
            b = os.read(fd, 1 << 20)
            if not b:
                return h.hexdigest()
            h.update(b)
    finally:
        os.close(fd)


def add_app(conn, name: str, paths, dev: int):
    """An app whose schedule reads every file in full, in two segments, ranges at their LBAs."""
    conn.execute("INSERT INTO apps (name, executable, argv_json, created_at) VALUES (?,?,?,?)",
                 (name, paths[0], json.dumps([name]), time.time()))
    files, segs = [], []
    half = (len(paths) + 1) // 2
    for idx, group in enumerate((paths[:half], paths[half:]), start=1):
        ranges = []
        for p in group:
            st = os.stat(p)
            f = ScheduledFile(p, st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)
            if f not in files:
                files.append(f)
            try:
                extents = extents_of(p)
            except OSError:   # no FIEMAP (tmpfs): one range, place unknown
                extents = [type("E", (), dict(physical=0, length=st.st_size, logical=0))]
            for e in extents:
                ranges.append(Range(dev, e.physical // 512, e.length // 512, e.length, f, e.logical))
        ranges.sort(key=lambda r: r.sector)
        segs.append(Segment(idx, 1, 1, 0.0, 0.005, sum(r.length for r in ranges), ranges))
    sched = Schedule(None, name, "paper", "model", 0.0, sum(s.bytes for s in segs), 0, [], segs, files, {})
    return save_schedule(conn, sched)


@pytest.fixture
def two_apps(ext4, db_path):
    """Apps a and b on the loop file system; both read the shared files s*."""
    # Written together with unrelated files, so each app's files are interleaved with others'.
    names = [f"s{i}" for i in range(4)] + [f"a{i}" for i in range(6)] + [f"b{i}" for i in range(6)] \
        + [f"other{i}" for i in range(6)]
    random.Random(2).shuffle(names)
    by_name = dict(zip(names, make_fragmented(ext4.mnt, names, seed=2)))
    shared, a, b = ([by_name[f"{x}{i}"] for i in range(n)] for x, n in (("s", 4), ("a", 6), ("b", 6)))
    conn = open_db(db_path)
    add_app(conn, "a", a[:3] + shared + a[3:], ext4.dev)
    add_app(conn, "b", b[:3] + shared[::-1] + b[3:], ext4.dev)
    yield conn, shared, a, b
    conn.close()


def test_dry_run_changes_nothing(two_apps, db_path):
    conn, shared, a, b = two_apps
    files = shared + a + b
    before = {p: (extents_of(p), sha(p)) for p in files}
    sched_before = load_active_schedule(conn, "a").id
    r = relocate_apps(conn, ["a", "b"], dry_run=True)
    assert r.dry_run and r.moved_files == len(files) and not r.refused
    assert r.model_after["a"]["seeks"] < r.model_before["a"]["seeks"]
    assert {p: (extents_of(p), sha(p)) for p in files} == before
    assert load_active_schedule(conn, "a").id == sched_before
    assert conn.execute("SELECT count(*) FROM relocations").fetchone()[0] == 0
    # The command prints the same plan and still changes nothing.
    from click.testing import CliRunner
    from warmstart.cli import cli
    out = CliRunner().invoke(cli, ["--db", str(db_path), "relocate", "--dry-run", "a", "b"])
    assert out.exit_code == 0, out.output
    assert f"would move {len(files)} files" in out.output and "modelled launch" in out.output
    assert {p: (extents_of(p), sha(p)) for p in files} == before


def test_relocation_makes_files_contiguous_in_order_and_keeps_content(two_apps, ext4):
    conn, shared, a, b = two_apps
    files = shared + a + b
    hashes = {p: sha(p) for p in files}
    stats = {p: os.stat(p) for p in files}
    n_before = sum(len(extents_of(p)) for p in files)
    assert n_before >= 3 * len(files)   # the setup really fragmented them
    r = relocate_apps(conn, ["a", "b"])
    assert not r.refused, r.refused
    assert r.moved_files == len(files) and r.extents_before == n_before
    assert {p: sha(p) for p in files} == hashes
    # Identity the replayer checks is untouched by the move.
    for p in files:
        st = os.stat(p)
        assert (st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns) == \
            (stats[p].st_ino, stats[p].st_size, stats[p].st_mtime_ns, stats[p].st_ctime_ns)
    # Every file is one physical run now, and the files follow each other in layout order.
    order = [os.fsencode(x["path"]) for x in r.pieces]
    assert order[:4] == [shared[0], shared[1], shared[2], shared[3]] or set(order[:4]) == set(shared)
    starts = []
    for p in order:
        ex = extents_of(p)
        assert all(y.physical == x.physical_end for x, y in zip(ex, ex[1:])), p
        starts.append(ex[0].physical)
    assert starts == sorted(starts)
    span = extents_of(order[-1])[-1].physical_end - starts[0]
    assert span <= r.region_bytes * 1.05 + (4 << 20)
    assert r.extents_after < n_before
    # The schedules were remapped: their ranges are now at the new places, few seeks.
    for name in ("a", "b"):
        s = load_active_schedule(conn, name)
        assert s.params.get("remapped_from") is not None
        assert "not re-run" in [x for x in r.reanalysis if x["app"] == name][0]["analyzer"]  # no recordings
        for seg in s.segments:
            for rng in seg.ranges:
                ex = [e for e in extents_of(rng.file.path)
                      if e.logical <= rng.file_offset < e.logical + e.length][0]
                assert rng.sector == (ex.physical + rng.file_offset - ex.logical) // 512
        assert r.model_after[name]["seeks"] * 5 <= r.model_before[name]["seeks"]
    assert conn.execute("SELECT moved_files FROM relocations").fetchone()[0] == len(files)
    print(f"extents {n_before} -> {r.extents_after}; model a {r.model_before['a']} -> {r.model_after['a']}")


def test_refusals_say_why_and_the_rest_still_moves(ext4, db_path, tmp_path):
    paths = make_fragmented(ext4.mnt, ["ok", "imm", "app", "busy", "exe"], seed=5)
    ok, imm, app, busy, exe = paths
    os.chmod(exe, 0o755)
    outside = bytes(tmp_path / "outside")   # on the host file system, not the loop one
    with open(outside, "wb") as f:
        f.write(os.urandom(100000))
    conn = open_db(db_path)
    add_app(conn, "r", paths + [outside], ext4.dev)
    _run("chattr", "+i", os.fsdecode(imm))
    _run("chattr", "+a", os.fsdecode(app))
    writer = os.open(busy, os.O_WRONLY)
    # A running program whose executable is on the loop fs: opening it O_RDWR gives ETXTBSY.
    with open(exe, "wb") as f:
        f.write(Path("/bin/sleep").read_bytes())
    proc = subprocess.Popen([os.fsdecode(exe), "30"])
    try:
        # The executable changed size since the schedule: re-add a schedule with current identities.
        conn.execute("DELETE FROM apps WHERE name = 'r'")
        add_app(conn, "r", paths + [outside], ext4.dev)
        before = {p: extents_of(p) for p in (imm, app, busy, exe)}
        r = relocate_apps(conn, ["r"])
    finally:
        proc.kill()
        proc.wait()
        os.close(writer)
        _run("chattr", "-i", "-a", os.fsdecode(imm))
        _run("chattr", "-a", os.fsdecode(app))
    why = {os.fsencode(x["path"]): x["reason"] for x in r.refused}
    assert "immutable" in why[imm]
    assert "append-only" in why[app]
    assert "open for writing" in why[busy] and str(os.getpid()) in why[busy]
    assert "running program" in why[exe]
    assert "another file system" in why[outside]
    assert ok not in why and r.moved_files == 1
    assert {p: extents_of(p) for p in (imm, app, busy, exe)} == before
    conn.close()


def test_not_enough_free_space_is_refused(ext4, db_path):
    paths = make_fragmented(ext4.mnt, ["f0", "f1", "f2"], chunks=16, seed=6)   # 3 x 1 MiB
    conn = open_db(db_path)
    add_app(conn, "full", paths, ext4.dev)
    vfs = os.statvfs(ext4.mnt)
    fill = ext4.mnt / "filler"
    # Leave about 1.5 MiB above the reserve: room for one file, not three.
    with open(fill, "wb") as f:
        os.posix_fallocate(f.fileno(), 0, vfs.f_bavail * vfs.f_frsize - (8 << 20) - (3 << 19))
    before = {p: extents_of(p) for p in paths}
    r = relocate_apps(conn, ["full"], dry_run=True)
    reasons = [x["reason"] for x in r.refused]
    assert reasons and all("more free space than exists" in x for x in reasons)
    assert len(r.refused) >= 2 and r.region_bytes <= (3 << 19)
    assert {p: extents_of(p) for p in paths} == before
    conn.close()


def test_other_file_systems_are_not_supported(db_path, tmp_path):
    require(have_root(), "needs root")
    shm = Path("/dev/shm") / f"wsreloc-{os.getpid()}"
    shm.mkdir()
    try:
        paths = make_fragmented(shm, ["t0", "t1"], chunks=2)
        conn = open_db(db_path)
        add_app(conn, "tmpfs", paths, os.stat(shm).st_dev)
        with pytest.raises(WarmstartError, match="not supported on tmpfs.*nothing was changed"):
            relocate_apps(conn, ["tmpfs"])
        conn.close()
    finally:
        for p in shm.iterdir():
            p.unlink()
        shm.rmdir()


CHILD = """
import sys
sys.path.insert(0, sys.argv[1])
from warmstart.db import open_db
from warmstart.relocate import relocate_apps
conn = open_db(sys.argv[2])
print("START", flush=True)
relocate_apps(conn, ["a", "b"], granularity=sys.argv[3], progress=lambda m: print(m, flush=True))
print("DONE", flush=True)
"""


def test_sigkill_at_random_points_never_corrupts_a_file(two_apps, ext4, db_path):
    conn, shared, a, b = two_apps
    files = shared + a + b
    hashes = {p: sha(p) for p in files}

    def child(granularity):
        p = subprocess.Popen([sys.executable, "-c", CHILD, str(REPO), str(db_path), granularity],
                             stdout=subprocess.PIPE, text=True)
        assert p.stdout.readline().strip() == "START"
        # Planning done, the moves start now: aim the kills at the moves.
        assert p.stdout.readline().startswith("allocating")
        return p

    # Calibrate: how long the moves take.
    durations = []
    for _ in range(2):   # the shorter of two, so a burst of load does not stretch the window
        p = child("file")
        t0 = time.monotonic()
        while not p.stdout.readline().startswith("moved "):
            pass
        durations.append(time.monotonic() - t0)
        assert p.wait(timeout=120) == 0
    full = 1.2 * min(durations)
    rng = random.Random(int(os.environ.get("WARMSTART_CRASH_SEED", "9")))
    kills, mid_move, i = 0, 0, 0
    # Children that finish before the kill do not count: go on until 20 were really killed, 3 of
    # them while the files were being moved (a kill aimed into a ~10 ms move lands there in about
    # 1 of 4 tries on a busy machine; the bound on tries keeps a kill that never lands a failure).
    while (kills < 20 or mid_move < 3) and i < 100:
        i += 1
        layout_before = {q: extents_of(q) for q in files}
        proc = child("file" if i % 2 else "range")
        if i % 4 < 2:
            # Anywhere from the region's allocation to the end of the moves.
            time.sleep(rng.uniform(0, full))
        else:
            # Aimed inside the moves: after the first piece moved (its progress line), a random
            # point of the rest (a 16-file move takes ~15 ms; random times alone landed mid-move
            # in only 2 of 20 kills on a busy machine).
            line = proc.stdout.readline()
            while line and not line.startswith(("moving:", "moved ")):
                line = proc.stdout.readline()
            time.sleep(rng.uniform(0, full / 4))
        proc.kill()
        proc.wait()
        kills += proc.returncode == -9
        changed = sum(extents_of(q) != layout_before[q] for q in files)
        mid_move += 0 < changed < len(files)
        bad = [q for q in files if sha(q) != hashes[q]]
        assert not bad, f"kill {i}: corrupted {bad}"
    assert kills >= 20, f"only {kills} of {i} children were killed before they finished"
    subprocess.run(["sync"], check=True)
    _run("umount", str(ext4.mnt))
    try:
        fsck = subprocess.run(["e2fsck", "-fn", ext4.loop], capture_output=True, text=True)
        assert fsck.returncode == 0, fsck.stdout + fsck.stderr
    finally:
        _run("mount", "-t", "ext4", ext4.loop, str(ext4.mnt))
    assert {q: sha(q) for q in files} == hashes
    print(f"runs={i} kills={kills} mid_move={mid_move} calibration={full:.3f}s")
    assert mid_move >= 3, f"only {mid_move} kills landed while files were being moved"
