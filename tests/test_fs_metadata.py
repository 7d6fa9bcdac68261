"""Metadata warmed the way each file system needs (warmstart/fs/metadata.py, replayer/fsmeta.c):
ext4 by block-device reads, XFS and btrfs through the file system (the replayer's metadata step),
and raw block-device ranges only where they can help."""

import os
import shutil
import subprocess
import sys

import pytest

from conftest import have_tracefs, require
from replay_helpers import REPLAY, file_range, make_app, run_replayer, save, scheduled_file
from warmstart.analyzer import inputs
from warmstart.analyzer.analyze import add_file_metadata, build_sequence, file_map, map_sequence
from warmstart.db import open_db
from warmstart.db.schedules import load_active_schedule
from warmstart.formats import wsr
from warmstart.fs import metadata
from warmstart.mountinfo import Mount
from warmstart.replay.export import contents, write_export


def test_each_file_system_has_its_mode():
    for fs in ("ext4", "ext3", "ext2"):
        assert metadata.metadata_mode(fs) == metadata.BDEV
    for fs in ("xfs", "btrfs", "overlay", "f2fs", "tmpfs", "", None):
        assert metadata.metadata_mode(fs) == metadata.FS, fs


def test_raw_reads_help_only_inside_an_ext4_we_can_read(emu_hdd):
    """An ext4's device (the emulated disk's), not XFS's or btrfs's; nor an ext4 on a device whose
    node cannot be opened (this machine's root disk: EPERM; here one with no node at all)."""
    ext4, xfs, btrfs, gone = emu_hdd.dev, os.makedev(7, 201), os.makedev(0, 244), os.makedev(7, 250)
    require(not os.path.exists("/dev/loop250"), "/dev/loop250 exists")
    policy = metadata.RawReadPolicy([Mount(ext4, b"/", b"/a", "ext4"), Mount(xfs, b"/", b"/b", "xfs"),
                                     Mount(btrfs, b"/", b"/c", "btrfs"), Mount(gone, b"/", b"/d", "ext4")])
    assert policy.helps(ext4, 0) and policy.helps(ext4, 1 << 30)
    assert not policy.helps(gone, 0) and "no device node" in policy.why_not(gone)
    assert not policy.helps(xfs, 0)
    assert not policy.helps(os.makedev(7, 202), 0)      # no mount: a btrfs member device, say
    assert "xfs" in policy.why_not(xfs) and "no mounted file system" in policy.why_not(os.makedev(7, 202))
    assert metadata.modes([ext4, xfs, btrfs, 12345], [Mount(ext4, b"/", b"/a", "ext4"),
                                                       Mount(xfs, b"/", b"/b", "xfs")]) == \
        {ext4: "bdev", xfs: "fs", btrfs: "fs", 12345: "fs"}


# ---- the replayer's metadata step on XFS and btrfs ------------------------------------------------

NAMES = 300     # entries per directory: long names make each directory several blocks / leaves


def _tree(disk, tag, request, tmp_path):
    """Two packages of NAMES small files each, created interleaved; returns (dirs, files read)."""
    base = disk.mountpoint / f"fsmeta-{tag}-{os.getpid()}-{tmp_path.name}"
    dirs = [base / "pkg0" / "sub", base / "pkg1" / "sub"]
    request.addfinalizer(lambda: shutil.rmtree(base, ignore_errors=True))   # the disk is the session's
    for d in dirs:
        d.mkdir(parents=True)
    for k in range(NAMES):
        for d in dirs:
            (d / f"module_with_a_rather_long_name_{k:05d}.py").write_bytes(b"x" * 3000)
    # written home, not only to the log: XFS keeps metadata in its log's pinned buffers (which
    # drop_caches cannot drop) until the log is pushed; a freeze pushes it
    for op in ("--freeze", "--unfreeze"):
        subprocess.run(["fsfreeze", op, str(disk.mountpoint)], check=True)
    return [base, base / "pkg0", base / "pkg1", *dirs], [dirs[0] / "module_with_a_rather_long_name_00007.py",
                                                         dirs[1] / "module_with_a_rather_long_name_00150.py"]


def _walk_reads(disk, dirs, files) -> int:
    """Block reads the disk saw for a listing of every directory and a stat of every file."""
    disk.reset_stats()
    for d in dirs:
        os.listdir(d)
    for f in files:
        os.lstat(f)
    return disk.stats()["reads"]


@pytest.mark.parametrize("fs", ["xfs", "btrfs"])
def test_metadata_step_warms_the_file_system_itself(fs, request, tmp_path):
    require(REPLAY.exists(), "build/warmstart-replay missing: run `make binaries`")
    disk = request.getfixturevalue(f"emu_{fs}")
    dirs, files = _tree(disk, fs, request, tmp_path)
    conn = open_db(tmp_path / "db")
    make_app(conn, "t", [sys.executable])
    sfs = [scheduled_file(p) for p in files]
    save(conn, "t", [[file_range(sf, 0, 4096) for sf in sfs]], sfs)
    sched = load_active_schedule(conn, "t")
    assert all(f.flags == wsr.FILE_WARM_META for f in contents(sched).files)
    assert metadata.modes({disk.dev}) == {disk.dev: "fs"} or fs == "btrfs"
    plain = tmp_path / "plain.wsr"
    plain.write_bytes(wsr.encode(contents(sched, fs_metadata=False)))
    warm = write_export(sched, tmp_path / "warm.wsr").path
    reads = {}
    for name, export in (("data only", plain), ("metadata step", warm)):
        disk.drop_caches()
        rc, st, err = run_replayer(export, "--mode", "reorder")
        assert rc == 0 and st["status"] == "ok", err
        reads[name] = (_walk_reads(disk, dirs, files), st["meta_dirs"], st["meta_dir_errors"])
    # the data fetch opened the same files: only the metadata step read the directories whole
    assert reads["data only"][0] > 0 and reads["data only"][1] == 0, reads
    assert reads["metadata step"][0] == 0 and reads["metadata step"][1] >= len(dirs), reads
    assert reads["metadata step"][2] == 0, reads


# ---- the analyzer schedules raw ranges only where they help ---------------------------------------

def _record_and_map(disk, tag, request, tmp_path):
    """Record a cold `cat` of files on the disk and run the analyzer's file map and metadata
    steps on it (what analyze() schedules): (the file map's report, the raw ranges of the disk)."""
    require(have_tracefs(), "needs root and tracefs")
    dirs, files = _tree(disk, tag, request, tmp_path)
    db = tmp_path / "db"
    argv = ["/bin/cat", *map(str, files)]
    p = subprocess.run([sys.executable, "-m", "warmstart", "--db", str(db), "record", "--name", tag, "--", *argv],
                       capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr
    conn = open_db(db)
    recs = inputs.recordings(conn, inputs.app_id(conn, tag), ())
    rids = [r.id for r in recs]
    fmap = file_map(conn, rids)
    _, items = map_sequence(build_sequence(conn, recs, None), fmap)
    add_file_metadata(items)
    return fmap.report, [p for ps in items for p in ps if p.file is None and p.dev == disk.dev]


def test_ext4_schedules_keep_block_device_metadata(emu_hdd, request, tmp_path):
    report, raw = _record_and_map(emu_hdd, "ext4", request, tmp_path)
    assert raw, "ext4: the files' inode, directory and extent blocks are read through the block device"
    # none of the disk's dropped (the host's root disk may be: it cannot be opened on some machines)
    assert f"{os.major(emu_hdd.dev)}:{os.minor(emu_hdd.dev)}" not in report.raw_dropped, report


@pytest.mark.parametrize("fs", ["xfs", "btrfs"])
def test_no_block_device_ranges_where_they_cannot_help(fs, request, tmp_path):
    disk = request.getfixturevalue(f"emu_{fs}")
    report, raw = _record_and_map(disk, fs, request, tmp_path)
    assert raw == []
    key = f"{os.major(disk.dev)}:{os.minor(disk.dev)}"
    # the launch did read metadata there (unmapped): dropped, with the reason
    assert report.dropped_raw_bytes > 0 and key in report.raw_dropped, report


def test_export_marks_the_files_the_analyzer_named():
    """The analyzer stores which file systems to warm through (params fs_metadata_devs); the
    export marks exactly those files, whatever this machine's mounts say."""
    from warmstart.model import Schedule, ScheduledFile
    files = [ScheduledFile(b"/x/a", 5, 10, 1, 1, 1), ScheduledFile(b"/y/b", 6, 11, 1, 1, 1)]
    sched = Schedule(None, "t", "test", "model", 0.1, 0, 0, [], [], files, {}, params={"fs_metadata_devs": [5]})
    assert [f.flags for f in contents(sched).files] == [wsr.FILE_WARM_META, 0]
    assert [f.flags for f in contents(sched, fs_metadata=False).files] == [0, 0]
    # no decision stored (an older or imported schedule): this machine's mounts decide
    sched.params = {}
    assert [f.flags for f in contents(sched).files] == [wsr.FILE_WARM_META] * 2   # devs 5, 6: no mount
