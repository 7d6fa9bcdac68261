"""A cold cache is cold for metadata too (recorder/coldcache.release_pinned): on ext4 a block the
last launch changed (an inode whose atime it updated) stays pinned by the journal after its
write-back, and drop_caches alone leaves it cached; the next recording then misses its read,
and every later launch makes it after the release (docs/recording.md)."""

import ctypes
import os
import subprocess

from warmstart.recorder.coldcache import _drop, drop_caches


def _cached(node: str, offset: int) -> bool:
    """Is the 4 KiB page of the block device at byte `offset` in the page cache? (cachestat)"""
    libc = ctypes.CDLL(None, use_errno=True)
    rng, st = (ctypes.c_uint64 * 2)(offset, 4096), (ctypes.c_uint64 * 5)()
    fd = os.open(node, os.O_RDONLY)
    try:
        if libc.syscall(451, fd, rng, st, 0) != 0:      # cachestat(2), Linux 6.5
            raise OSError(ctypes.get_errno(), "cachestat")
    finally:
        os.close(fd)
    return st[0] > 0


def _inode_block_offset(disk, path) -> int:
    """Byte offset on the device of the block holding path's inode (debugfs, not our code)."""
    out = subprocess.run(["debugfs", "-R", f"imap <{os.stat(path).st_ino}>", disk.loop_dev],
                         capture_output=True, text=True, check=True).stdout
    block = int(out.split("located at block ")[1].split(",")[0])
    return block * os.statvfs(disk.mountpoint).f_bsize // 4096 * 4096


def test_a_drop_takes_the_inode_blocks_the_last_launch_changed(emu_hdd, tmp_path):
    base = emu_hdd.mountpoint / f"cold-{os.getpid()}-{tmp_path.name}"
    base.mkdir()
    f = base / "f"
    try:
        f.write_bytes(b"x" * 4096)
        drop_caches()                      # written and checkpointed: nothing of it pinned
        where = _inode_block_offset(emu_hdd, f)
        f.read_bytes()                     # a launch: relatime updates the atime (atime <= mtime)
        assert _cached(emu_hdd.loop_dev, where)
        os.sync()                          # the changed inode block written home ...
        _drop()
        assert _cached(emu_hdd.loop_dev, where), "drop_caches alone dropped it: nothing to show"
        drop_caches()                      # ... and with the journal checkpointed, dropped
        assert not _cached(emu_hdd.loop_dev, where)
    finally:
        f.unlink(missing_ok=True)
        base.rmdir()
