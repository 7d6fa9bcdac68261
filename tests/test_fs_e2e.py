"""Prefetching on every file system (issue 22): the aged system image in ext4, XFS and btrfs on
the emulated 7200 rpm disk, and an overlayfs over it (a container's launch); for each, a real
Python start recorded and analyzed with the CLI, then launched plainly with `warmstart hook
install` running, caches dropped before every launch.

"Prefetched" means here what a user would check:
- the recording maps the launch to files: the schedule holds the files the launch read (not raw
  block ranges of the loop device, which XFS and btrfs never look in), its raw device bytes at
  most a tenth of its file bytes;
- every hooked launch's record says `ready` (the schedule was fetched before the app ran on);
- the hooked launch takes at most 0.6 x its cold launch (the issue's target for every app).
"""

import statistics

import pytest

from conftest import _emu_name, have_fuse, have_loop, require
from test_hook_daemon import have_fanotify_perm
from test_hook_e2e import BUILD, HookEnv, wait_for_hook_rows

APP = ("import asyncio, logging.handlers, argparse, tarfile, json, email.mime.multipart, "
       "http.client, decimal, sqlite3, unittest")
REPS = 2           # cold and hooked launches each, interleaved
TARGET = 0.6       # hooked / cold median, every app (issue 22)
RAW_SHARE = 0.10   # raw device bytes / file bytes in the schedule, at most


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
    rec = h.wsj("record", "--name", name, "--", *h.argv(name))
    an = h.wsj("analyze", name)
    fm = an["filemap"]
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
           "device_bytes": fm["device_bytes"], "metadata_bytes": fm["metadata_bytes"],
           "skipped_files": fm["skipped_files"], "t_exp_s": an["t_exp_s"],
           "outcomes": [e["outcome"] for e in events], "recorded_s": rec.get("launch_time_s")}
    res["ratio"] = res["hook"] / res["cold"]
    with capsys.disabled():
        print(f"\n{name}: " + ", ".join(f"{k} {v:.3f}" if isinstance(v, float) else f"{k} {v}"
                                        for k, v in res.items()))
    return res


def _assert_prefetched(res: dict) -> None:
    assert res["files"] >= 50 and res["mapped_bytes"] > 0, \
        f"the schedule maps {res['files']} files ({res['mapped_bytes']} bytes): the launch's files were not found"
    assert res["device_bytes"] <= RAW_SHARE * res["mapped_bytes"], \
        f"{res['device_bytes']} bytes of raw device ranges next to {res['mapped_bytes']} of files"
    assert len(res["outcomes"]) == REPS and all(o == "ready" for o in res["outcomes"]), res["outcomes"]
    assert res["ratio"] <= TARGET, \
        f"hooked {res['hook']:.3f} s vs cold {res['cold']:.3f} s: {res['ratio']:.2f} x, target {TARGET}"


@pytest.mark.parametrize("fs", ["ext4", "xfs", "btrfs"])
def test_hooked_launch_prefetched_on_each_file_system(fs, tmp_path, capsys):
    disk = _system_disk(fs)
    h = FsHookEnv(tmp_path, disk)
    try:
        _assert_prefetched(_prefetched_launches(h, f"fs-{fs}", capsys))
    finally:
        h.ws("hook", "uninstall", check=False)
        disk.down()


def test_launch_from_an_overlay_prefetched_like_from_its_lower_file_system(tmp_path, capsys):
    """A container-style launch: the app runs from an overlayfs whose lower layer is the ext4
    system image on the emulated disk (upper and work dirs on tmpfs). Prefetched as above, and
    its hooked launch within 1.10 x the same hooked launch from the lower file system itself."""
    disk = _system_disk("ext4")
    lower = FsHookEnv(tmp_path / "lower", disk)
    over = None
    try:
        (tmp_path / "lower").mkdir()
        res_lower = _prefetched_launches(lower, "ov-lower", capsys)
        lower.ws("hook", "uninstall", check=False)
        (tmp_path / "over").mkdir()
        over = FsHookEnv(tmp_path / "over", disk, root=disk.overlay())
        res = _prefetched_launches(over, "ov-overlay", capsys)
        _assert_prefetched(res)
        assert res["hook"] <= 1.10 * res_lower["hook"], \
            f"from the overlay {res['hook']:.3f} s, from its lower ext4 {res_lower['hook']:.3f} s"
    finally:
        for h in (lower, over):
            if h is not None:
                h.ws("hook", "uninstall", check=False)
        disk.down()
