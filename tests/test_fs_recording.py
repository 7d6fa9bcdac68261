"""Recording maps every file on every file system (issue 22 items 1 and 3): ext4, XFS, btrfs
(subvolumes too), overlayfs over a lower layer on the emulated disk, and stacked block devices
(dm over a disk, from a synthetic sysfs). Each live test records a real launch that reads and
mmaps files there, then checks that every file has its path and extents, that the cold reads
of the block trace lie in those extents (btrfs: after the chunk tree's translation) and that no
byte of them became a raw block range; and the recorder's statement of what it mapped."""

import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from conftest import require
from warmstart.analyzer.filemap import FileMap
from warmstart.analyzer.sequence import from_requests
from warmstart.db import recordings as store
from warmstart.db.connection import open_db
from warmstart.fs import FileSystems
from warmstart.fs.btrfs import DUP, RAID0, Chunk, to_physical, translate
from warmstart.model import BlockRequest, Extent
from warmstart.recorder.attribution import launch_requests
from warmstart.recorder.recorder import RecordOptions, record_once
from warmstart.recorder.resolve import resolve_inodes
from warmstart.recorder.tasks import TaskTree

MiB = 1 << 20
READER = """
import mmap, sys
for p in sys.argv[1:]:
    with open(p, "rb") as f:
        if p.endswith(".map"):
            m = mmap.mmap(f.fileno(), 0, prot=mmap.PROT_READ)
            sum(m[i] for i in range(0, len(m), 4096))
            m.close()
        else:
            while f.read(1 << 16):
                pass
"""


def _files(top: Path, sizes) -> list:
    """Files of random bytes, written out and evicted from the cache."""
    top.mkdir(parents=True, exist_ok=True)
    out = []
    for name, size in sizes:
        p = top / name
        with open(p, "wb") as f:
            f.write(os.urandom(size))
            f.flush()
            os.fsync(f.fileno())
        out.append(p)
    return out


def _record(tmp_path, argv, name="fsapp"):
    conn = open_db(tmp_path / "w.db")
    rid = record_once(conn, name, argv, RecordOptions(passthrough=False, warm_run=False), say=lambda m: None)
    return conn, rid


def _check_mapped(conn, rid, paths, real=None):
    """Every path (or its real file) is resolved with extents; the launch's cold data reads lie in
    them and none of those bytes is scheduled as a raw block range; returns the statement."""
    real = real or {p: p for p in paths}
    files = store.load_recording_files(conn, rid)
    by_path = {f.path: f for f in files if f.path}
    for p in paths:
        f = by_path.get(os.fsencode(real[p]))
        assert f is not None, f"{real[p]} not resolved; resolved: {sorted(by_path)}"
        assert f.extents and sum(e.length for e in f.extents) >= f.size - 4096, (p, f.extents)
    env = store.recording_env(store.get_recording(conn, rid))
    m = env["mapping"]
    ours = [by_path[os.fsencode(real[p])] for p in paths]
    assert m["mapped_files"] >= len(paths) and m["by_name"] >= len(paths), m
    assert not [u for u in m["unmapped"] if (u["ino"] in {f.ino for f in ours})], m["unmapped"]

    # the block trace's cold reads of these files are where their (translated) extents say
    fss = FileSystems()
    devs = {fss.of_dev(f.dev).data_device() for f in ours}
    reqs = [r for r in store.load_block_requests(conn, rid) if not r.is_write and r.dev in devs]
    ext_sectors = [(e.physical // 512, (e.physical + e.length) // 512) for f in ours for e in f.extents]
    in_files = sum(max(0, min(r.sector + r.nr_sectors, hi) - max(r.sector, lo))
                   for r in reqs for lo, hi in ext_sectors)
    total = sum(os.path.getsize(p) for p in paths)
    assert in_files * 512 >= 0.9 * total, (in_files * 512, total)

    # the analyzer maps those reads to the files: no raw block range overlaps their extents
    fmap = FileMap(files)
    seq = from_requests(store.load_block_requests(conn, rid))
    # (raw pieces of the files' own device: another disk's sector numbers may fall in the same range)
    raw = [pc for a in seq.accesses for pc in fmap.map_access(a) if pc.file is None and pc.dev in devs]
    overlap = sum(max(0, min(pc.end, hi) - max(pc.sector, lo)) for pc in raw for lo, hi in ext_sectors)
    assert overlap == 0, f"{overlap} sectors of the files' extents became raw block ranges"
    assert {os.fsencode(real[p]) for p in paths} <= {sf.path for sf in fmap.files}
    return m


def _launch(paths):
    return [sys.executable, "-c", READER] + [str(p) for p in paths]


@pytest.mark.parametrize("fixture", ["emu_hdd", "emu_xfs"])
def test_ext4_and_xfs_files_are_mapped(fixture, request, tmp_path, needs_tracefs):
    disk = request.getfixturevalue(fixture)
    top = Path(tempfile.mkdtemp(prefix="fsrec-", dir=disk.mountpoint))
    paths = _files(top, [("a.bin", 700 * 1024), ("b.map", 1 * MiB), ("c.bin", 300 * 1024)])
    conn, rid = _record(tmp_path, _launch(paths))
    m = _check_mapped(conn, rid, paths)
    assert m["file_systems"] and ("xfs" if fixture == "emu_xfs" else "ext4") in m["file_systems"]


def test_btrfs_files_in_subvolumes_are_mapped_in_physical_order(emu_btrfs, tmp_path, needs_tracefs):
    mnt = emu_btrfs.mountpoint
    require(subprocess.run(["which", "btrfs"], capture_output=True).returncode == 0, "needs btrfs-progs")
    # relocate the data chunks, so their logical addresses differ from the physical ones
    subprocess.run(["btrfs", "balance", "start", "-d", str(mnt)], check=True, capture_output=True)
    sub = mnt / f"fsrec-sv-{os.getpid()}"
    subprocess.run(["btrfs", "subvolume", "create", str(sub)], check=True, capture_output=True)
    top = Path(tempfile.mkdtemp(prefix="fsrec-", dir=mnt))
    paths = _files(top, [("a.bin", 900 * 1024), ("b.map", 600 * 1024)]) + \
        _files(sub, [("in-subvol.bin", 800 * 1024)])
    assert os.stat(paths[2]).st_dev != os.stat(paths[0]).st_dev    # a subvolume's own st_dev
    fs = FileSystems().of_path(str(mnt).encode())
    assert fs.name == "btrfs" and fs.devices() == [emu_btrfs.dev]
    # not the identity: the translation matters for these files
    fd = os.open(paths[0], os.O_RDONLY)
    try:
        from warmstart.fiemap import mapped_extents_fd
        logical = mapped_extents_fd(fd)
        physical = fs.extents(fd)
    finally:
        os.close(fd)
    assert [e.physical for e in logical] != [e.physical for e in physical]
    conn, rid = _record(tmp_path, _launch(paths))
    _check_mapped(conn, rid, paths)


def test_overlay_files_map_to_the_lower_layer(emu_xfs, tmp_path, needs_tracefs):
    base = Path(tempfile.mkdtemp(prefix="fsrec-ovl-", dir=emu_xfs.mountpoint))
    lower = base / "lower"
    paths = _files(lower, [("lib.so", 500 * 1024), ("data.map", 400 * 1024)])
    upper, work, merged = (Path(tempfile.mkdtemp(prefix=f"fsrec-{n}-")) for n in ("up", "wk", "mg"))
    subprocess.run(["mount", "-t", "overlay", "overlay", "-o",
                    f"lowerdir={lower},upperdir={upper},workdir={work}", str(merged)], check=True)
    try:
        shown = [merged / p.name for p in paths]
        conn, rid = _record(tmp_path, _launch(shown))
        _check_mapped(conn, rid, shown, real={s: p for s, p in zip(shown, paths)})
    finally:
        subprocess.run(["umount", str(merged)], check=True)
        for d in (upper, work, merged):
            shutil.rmtree(d, ignore_errors=True)


def test_a_file_that_cannot_be_mapped_is_named_with_its_reason(emu_hdd, tmp_path, needs_tracefs):
    top = Path(tempfile.mkdtemp(prefix="fsrec-gone-", dir=emu_hdd.mountpoint))
    keep, gone = _files(top, [("keep.bin", 200 * 1024), ("gone.bin", 300 * 1024)])
    ino = os.stat(gone).st_ino
    code = READER + f"\nimport os\nos.unlink({str(gone)!r})\n"
    conn, rid = _record(tmp_path, [sys.executable, "-c", code, str(keep), str(gone)])
    m = store.recording_env(store.get_recording(conn, rid))["mapping"]
    named = [u for u in m["unmapped"] if u["ino"] == ino]
    assert named and "deleted" in named[0]["reason"] and named[0]["bytes"] >= 200 * 1024, m["unmapped"]
    assert m["mapped_pct"] < 100 and m["mapped_files"] >= 1


def test_record_prints_what_it_mapped(emu_xfs, tmp_path, needs_tracefs):
    top = Path(tempfile.mkdtemp(prefix="fsrec-cli-", dir=emu_xfs.mountpoint))
    paths = _files(top, [("x.bin", 400 * 1024)])
    env = dict(os.environ, WARMSTART_DB=str(tmp_path / "w.db"))
    r = subprocess.run([sys.executable, "-m", "warmstart", "record", "--no-warm-run", "--name", "x", "--",
                        *_launch(paths)], env=env, capture_output=True, timeout=120)
    assert r.returncode == 0, r.stderr
    out = r.stdout.decode()
    assert "mapped " in out and "by the names opened" in out and "% of the launch's" in out, out


def test_names_resolve_without_walking(tmp_path):
    """The names opened give (dev, ino) -> path; nothing is walked for them."""
    paths = _files(tmp_path / "n", [("one", 4096), ("two", 8192)])
    fss = FileSystems()
    keys = {fss.key_and_real(str(p).encode())[0] for p in paths}
    got = resolve_inodes(keys, [str(p).encode() for p in paths], fss)
    assert got.by_name == 2 and got.by_walk == 0
    assert {f.path for f in got.files} == {str(p).encode() for p in paths}


# ---- btrfs chunk translation (pure logic) ------------------------------------------------------

def test_btrfs_chunk_translation_single_dup_raid0():
    chunks = sorted([Chunk(1 << 30, 256 * MiB, 64 * 1024, 1, ((1, 20 * MiB),)),                 # single
                     Chunk(2 << 30, 64 * MiB, 64 * 1024, 4 | DUP, ((1, 300 * MiB), (1, 364 * MiB))),  # dup
                     Chunk(3 << 30, 128 * MiB, 64 * 1024, 1 | RAID0, ((1, 500 * MiB), (2, 40 * MiB)))])
    assert to_physical(chunks, (1 << 30) + 4096) == (1, 20 * MiB + 4096, 256 * MiB - 4096)
    assert to_physical(chunks, (2 << 30) + 8192)[:2] == (1, 300 * MiB + 8192)   # dup: the first copy
    assert to_physical(chunks, (3 << 30) + 64 * 1024 + 5)[:2] == (2, 40 * MiB + 5)   # second stripe
    assert to_physical(chunks, (3 << 30) + 128 * 1024)[:2] == (1, 500 * MiB + 64 * 1024)
    assert to_physical(chunks, 5) is None
    # a RAID0 extent spanning stripes: the parts on devid 1 only, the rest counted as left out
    out, left = translate(chunks, [Extent(0, 3 << 30, 192 * 1024)], devid=1)
    assert out == [Extent(0, 500 * MiB, 64 * 1024), Extent(128 * 1024, 500 * MiB + 64 * 1024, 64 * 1024)]
    assert left == 64 * 1024


# ---- stacked devices: dm over a disk partition, from a synthetic sysfs -------------------------

def _fake_sysfs(root: Path):
    """dm-0 (253:0) over sda2 (8:2, sectors 2048.. of sda 8:0), as /sys shows it."""
    sda = root / "devices/sda"
    (sda / "sda2").mkdir(parents=True)
    (sda / "dev").write_text("8:0\n")
    (sda / "sda2/dev").write_text("8:2\n")
    (sda / "sda2/start").write_text("2048\n")
    (sda / "sda2/size").write_text("1000000\n")
    dm = root / "devices/dm-0"
    (dm / "slaves").mkdir(parents=True)
    (dm / "dev").write_text("253:0\n")
    os.symlink(sda / "sda2", dm / "slaves/sda2")
    (root / "dev/block").mkdir(parents=True)
    for name, target in (("8:0", sda), ("8:2", sda / "sda2"), ("253:0", dm)):
        os.symlink(target, root / "dev/block" / name)


def test_dm_over_disk_counts_each_request_once(tmp_path):
    _fake_sysfs(tmp_path)
    dm, sda = os.makedev(253, 0), os.makedev(8, 0)
    tree = TaskTree(root=100, tids={100})
    reqs = []
    for i, sector in enumerate((0, 800, 5000)):
        t = 1000 + i * 100
        # the app queues on dm-0; dm remaps to sda2 (offset 2048 of the linear target) = sda + 2048
        reqs.append(BlockRequest(dev=dm, sector=sector, nr_sectors=8, rwbs="R", tid=100, comm="app",
                                 queue_ns=t, issue_ns=t, complete_ns=t + 50))
        reqs.append(BlockRequest(dev=sda, sector=2048 + 2048 + sector, nr_sectors=8, rwbs="R", tid=100,
                                 comm="app", queue_ns=t + 1, issue_ns=t + 1, complete_ns=t + 50))
    # a read of another partition of the same disk (sda1, sectors < 2048) is its own request
    reqs.append(BlockRequest(dev=sda, sector=100, nr_sectors=8, rwbs="R", tid=100, comm="app",
                             queue_ns=2000, issue_ns=2000, complete_ns=2050))
    got = launch_requests(reqs, tree, [dm, sda], 0, 10 ** 9, kthread=lambda tid, comm: False,
                          sys_root=str(tmp_path))
    assert [(os.major(r.dev), r.sector) for r in got] == [(253, 0), (253, 800), (253, 5000), (8, 100)]


def test_profile_disk_of_a_btrfs_directory_times_its_device(emu_btrfs, tmp_path):
    """The directory's file system has an anonymous st_dev: the disk under it is profiled."""
    import json
    env = dict(os.environ, WARMSTART_DB=str(tmp_path / "w.db"))
    r = subprocess.run([sys.executable, "-m", "warmstart", "profile-disk", "--samples", "1", "--json",
                        str(emu_btrfs.mountpoint)], env=env, capture_output=True, timeout=300)
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert os.stat(out["device"]).st_rdev == emu_btrfs.dev and out["c_switch_s"] > 0, out


def test_writable_dir_on_a_btrfs_device_is_found(emu_btrfs):
    from warmstart.analyzer.profile import writable_dir_on
    d = tempfile.mkdtemp(prefix="fsrec-w-", dir=emu_btrfs.mountpoint)
    assert writable_dir_on(emu_btrfs.dev, candidates=("/nonexistent", d)) == d


def test_an_inode_of_no_mounted_file_system_is_named_not_dropped():
    """A page-cache add of a file system not mounted here (another mount namespace) stays a file
    of the launch, not mapped, with the reason; the block devices' own cache is not a file."""
    from warmstart.model import PageAdd
    from warmstart.recorder.mapping import statement
    from warmstart.recorder.recorder import _on_files
    fss = FileSystems()
    unmounted = os.makedev(0, 4000)
    root_dev = os.stat("/").st_dev
    bdev_cache_ino = (os.major(root_dev) << 20) | os.minor(root_dev)
    assert _on_files(fss, unmounted, 12) and not _on_files(fss, os.makedev(0, 3), bdev_cache_ino)
    got = resolve_inodes({(unmounted, 12)}, [], fss)
    m = statement(got.files, got.reasons, [PageAdd(t_ns=0, dev=unmounted, ino=12, first_index=0, nr_pages=3, tid=1)],
                  [], fss, got.by_name, got.by_walk)
    assert m["mapped_files"] == 0 and m["unmapped_files"] == 1
    assert "mounted" in m["unmapped"][0]["reason"] and m["unmapped"][0]["bytes"] == 3 * 4096


def _my_locks(path) -> list:
    """This process's POSIX locks on the file at path (/proc/locks)."""
    ino = os.stat(path).st_ino
    out = []
    with open("/proc/locks") as f:
        for line in f:
            parts = line.split()
            if "->" in parts:
                continue            # a waiter, not a holder
            if parts[1] == "POSIX" and int(parts[4]) == os.getpid() and int(parts[5].split(":")[2]) == ino:
                out.append(tuple(parts[3:4] + parts[6:8]))
    return sorted(out)


def test_reading_the_open_queue_keeps_this_process_database_locks(tmp_path, needs_tracefs):
    """An open of the database by anyone while recording queues an event holding an fd of it;
    closing that fd in the recorder would drop the recorder's SQLite locks (POSIX locks go with
    any close of the file by the process), and the learner and a `record` then corrupted the
    database between them ("database disk image is malformed"). The queue is read elsewhere."""
    from warmstart.recorder.opens import OpenWatch
    from warmstart.mountinfo import mount_of_path
    db = tmp_path / "w.db"
    conn = open_db(db)
    conn.execute("SELECT count(*) FROM apps").fetchall()
    shm = f"{db}-shm"
    before = _my_locks(shm)
    assert before, "SQLite holds no lock on the -shm: nothing to check"
    with OpenWatch([mount_of_path(os.fsencode(db)).target]) as watch:
        opener = subprocess.Popen([sys.executable, "-c", "import sqlite3, sys; c = sqlite3.connect(sys.argv[1]); "
                                   "c.execute('SELECT count(*) FROM apps').fetchall()", str(db)])
        assert opener.wait() == 0
        names = watch.take()
    assert os.fsencode(shm) in names and os.fsencode(db) in names
    assert opener.pid in watch.openers[os.fsencode(db)]     # who opened it (recorder.unsynced reads)
    assert _my_locks(shm) == before
    conn.close()


def test_the_open_queue_is_taken_without_waiting_for_the_readers_closes(tmp_path, monkeypatch, needs_tracefs):
    """The reader lists the names, closes its output, and only then closes the events' fds:
    closing another program's truncated-and-rewritten ext4 file starts its write-back and may
    wait for a busy disk (0.6 s seen with a `dd` writing 128 MiB to another emulated disk).
    Here its closes are made to take 3 s: take() does not wait for them."""
    from warmstart.recorder import opens
    from warmstart.mountinfo import mount_of_path
    monkeypatch.setattr(opens, "READER", opens.READER + "\nimport time; time.sleep(3)\n")
    target = tmp_path / "opened"
    target.write_bytes(b"x")
    with opens.OpenWatch([mount_of_path(os.fsencode(target)).target]) as watch:
        subprocess.run(["cat", str(target)], check=True, stdout=subprocess.DEVNULL)
        t = time.monotonic()
        names = watch.take()
        took = time.monotonic() - t
    assert os.fsencode(target) in names and not watch.overflow
    assert took < 2.0, f"take() waited {took:.1f} s for the reader's closes"
