"""Prefetching on every file system (issue 22): the aged system image in ext4, XFS and btrfs on
the emulated 7200 rpm disk, and an overlayfs over it (a container's launch); for each, a real
Python start recorded and analyzed with the CLI, then launched plainly with `warmstart hook
install` running, caches dropped before every launch.

"Prefetched" means here what a user would check:
- the recording maps the launch to files: the schedule holds the files the launch read, and no
  raw block ranges of the loop device where the file system never looks in the block device's
  cache (XFS keeps its metadata in its own buffer cache, btrfs reads through its own mapping);
  ext4 reads its metadata (inode tables, directories) through that cache, so there they help;
- every hooked launch is prefetched (`ready`, or `deadline`: released on time with the
  schedule partly fetched; on a busy machine XFS's launches were `deadline` both times, 0.97 s
  hooked against 1.74 s cold);
- the hooked launch is faster than its cold launch (REPS each). The issue's targets
  (hook / cold within 1.10 x ext4's, at most 0.6 x cold) are bench figures: `warmstart bench --fs`.
"""

import statistics

import pytest

from conftest import _emu_name, have_fuse, have_loop, require
from test_hook_daemon import have_fanotify_perm
from test_hook_e2e import BUILD, HookEnv, wait_for_hook_rows
from warmstart.fs.metadata import metadata_mode

APP = ("import asyncio, logging.handlers, argparse, tarfile, json, email.mime.multipart, "
       "http.client, decimal, sqlite3, unittest")
REPS = 1           # cold and hooked launches each (hooked ~0.5-0.6 x cold here: one of each tells)


class FsHookEnv(HookEnv):
    """HookEnv whose app is APP, run chrooted in the system image or in the overlay over it."""

    def __init__(self, tmp, disk, root=None):
        super().__init__(tmp, disk)
        self.chroot_root = root

    def argv(self, name):
        return self.disk.chroot_argv(["python3", "-c", APP], root=self.chroot_root)


def _system_disk(fs: str):
    require(have_fuse() and have_loop(), "needs root, /dev/fuse, fusermount3 and loop devices")
    require(have_fanotify_perm(), "needs root and fanotify permission events")
    require((BUILD / "warmstartd").exists() and (BUILD / "warmstart-replay").exists(),
            "warmstartd / warmstart-replay not built: run `make binaries`")
    from warmstart.emudisk import EmuDisk
    return EmuDisk.up(name=_emu_name(f"fs{fs}"), profile="hdd7200", image="system", fs=fs, fresh=True)


def _prefetched_launches(h, name: str, capsys) -> dict:
    """Record and analyze the app, measure cold launches (no daemon), then hooked ones; check
    what "prefetched" means and return the numbers."""
    h.disk.drop_caches()
    h.ws("record", "--name", name, "--", *h.argv(name))
    an = h.wsj("analyze", name)
    fm = an["filemap"]
    from warmstart.db import open_db
    from warmstart.db.schedules import load_active_schedule
    from warmstart.devices import disk_of
    disk_devs = {h.disk.dev, disk_of(h.disk.dev)[0]}
    conn = open_db(h.db)
    raw_on_disk = sum(r.length for seg in load_active_schedule(conn, name).segments for r in seg.ranges
                      if r.file is None and r.dev in disk_devs)
    conn.close()
    cold, hooked = [], []
    for _ in range(REPS):
        h.disk.drop_caches()
        t, p = h.plain(name)
        assert p.returncode == 0, p.stderr
        cold.append(t)
    h.wsj("hook", "install")
    for rep in range(REPS):
        h.disk.drop_caches()
        t, p = h.plain(name)
        assert p.returncode == 0, p.stderr
        hooked.append(t)
        wait_for_hook_rows(h, rep + 1)   # its feedback reads the cache: before the next drop
    events = [e for e in h.events() if e.get("event") == "launch"]
    res = {"cold": statistics.median(cold), "hook": statistics.median(hooked), "cold_all": cold,
           "hook_all": hooked, "files": an["files"], "mapped_bytes": fm["mapped_bytes"],
           "device_bytes": fm["device_bytes"], "raw_on_disk": raw_on_disk, "metadata_bytes": fm["metadata_bytes"],
           "skipped_files": fm["skipped_files"], "t_exp_s": an["t_exp_s"],
           "outcomes": [e["outcome"] for e in events], "held_ms": [e.get("held_ms") for e in events]}
    res["ratio"] = res["hook"] / res["cold"]
    with capsys.disabled():
        print(f"\n{name}: " + ", ".join(f"{k} {v:.3f}" if isinstance(v, float) else f"{k} {v}"
                                        for k, v in res.items()))
    return res


def _assert_prefetched(res: dict, fs: str) -> None:
    assert res["files"] >= 50 and res["mapped_bytes"] > 0, \
        f"the schedule maps {res['files']} files ({res['mapped_bytes']} bytes): the launch's files were not found"
    assert metadata_mode(fs) == "bdev" or res["raw_on_disk"] == 0, \
        f"{res['raw_on_disk']} bytes of raw ranges of the disk scheduled on {fs}, whose reads never use them"
    out = res["outcomes"]
    assert len(out) == REPS and all(o in ("ready", "deadline") for o in out), out
    assert res["hook"] < res["cold"], \
        f"hooked {res['hook']:.3f} s vs cold {res['cold']:.3f} s: {res['ratio']:.2f} x, not faster"


@pytest.mark.parametrize("fs", ["ext4", "xfs", "btrfs"])
def test_hooked_launch_prefetched_on_each_file_system(fs, tmp_path, capsys):
    disk = _system_disk(fs)
    h = FsHookEnv(tmp_path, disk)
    try:
        _assert_prefetched(_prefetched_launches(h, f"fs-{fs}", capsys), fs)
    finally:
        h.ws("hook", "uninstall", check=False)
        disk.down()


def test_launch_from_an_overlay_prefetched(tmp_path, capsys):
    """A container-style launch: the app runs from an overlayfs whose lower layer is the ext4
    system image on the emulated disk (upper and work dirs on tmpfs). Prefetched as above. How it
    compares with the same launch from the lower file system (the issue's 1.10 x target) is a
    bench figure: `warmstart bench --overlay` (docs/benchmarks.md)."""
    disk = _system_disk("ext4")
    over = FsHookEnv(tmp_path, disk, root=disk.overlay())
    try:
        _assert_prefetched(_prefetched_launches(over, "ov-overlay", capsys), "ext4")
    finally:
        over.ws("hook", "uninstall", check=False)
        disk.down()
