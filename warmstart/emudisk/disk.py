"""EmuDisk: a file system (ext4, XFS or btrfs) on a loop device whose block requests go through a disk model.

The stack, bottom up:  tmpfs image file -> hddsim (FUSE, timed) -> loop (direct I/O) -> ext4/xfs/btrfs.
Its state lives in /run/warmstart-emu/<name>/state.json so another process can attach to it,
and so `up` after a crash can find and undo what the crashed run left behind.
"""

import json
import os
from pathlib import Path
from typing import Dict, List, Optional, Sequence

from ..errors import WarmstartError
from ..procs import running
from . import chroot, hddsim, image as images, profiles, sysops

STATE_ROOT = Path(os.environ.get("WARMSTART_EMU_STATE", "/run/warmstart-emu"))
IMAGES = ("empty", "system", "system-random")  # system-*: emudisk.system_image.LAYOUTS
OVERLAY_DIR = "overlay"   # in the state dir: rw (tmpfs with upper/ and work/) and merged


def _state_dir(name: str) -> Path:
    if not name or "/" in name or name.startswith("."):
        raise WarmstartError(f"bad emulated disk name {name!r}: use letters, digits, '-' or '_'")
    return STATE_ROOT / name


class EmuDisk:
    """One emulated disk. Create with EmuDisk.up(...), find an existing one with EmuDisk.attach(name)."""

    def __init__(self, state: dict):
        self._state = state
        self.name: str = state["name"]
        self.profile: str = state["profile"]
        self.image: str = state["image"]
        self.fs: str = state.get("fs", "ext4")
        self.size_mb: int = state["size_mb"]
        self.stroke_bytes: Optional[int] = state.get("stroke_bytes")
        self.mountpoint = Path(state["mountpoint"])
        self.loop_dev: str = state["loop_dev"]
        self.dev: int = os.stat(self.loop_dev).st_rdev
        self.backing = Path(state["backing"])
        self.fuse_dir = Path(state["fuse_dir"]) if state.get("fuse_dir") else None

    def model_key(self) -> str:
        """What this disk's timing depends on: its model and parameters, its size and the hddsim
        build (the model times a request by its offset, not by what the image holds there). Disks
        with one key time alike, whatever loop device and file system they have."""
        import hashlib
        src = {k: self._state.get(k) for k in ("profile", "stroke_bytes", "hddsim_args")}
        src.update(image_bytes=self.backing.stat().st_size,
                   hddsim=hashlib.sha256(hddsim.binary().read_bytes()).hexdigest())
        return hashlib.sha256(json.dumps(src, sort_keys=True).encode()).hexdigest()[:16]

    def __repr__(self):
        return f"EmuDisk({self.name!r}, profile={self.profile!r}, {self.loop_dev} on {self.mountpoint})"

    # ---- life cycle ---------------------------------------------------------------------

    @classmethod
    def up(cls, name: str = "emu", profile: str = "hdd7200", image: str = "empty", size_mb: int = 512,
           stroke_bytes: Optional[int] = None, fresh: bool = False,
           hddsim_args: Sequence[str] = (), progress=None, fs: str = "ext4") -> "EmuDisk":
        """Bring the disk up; reuse it if it is already up, healthy and configured the same
        (unless fresh=True), else clean whatever is left of it (even after a crash) and rebuild.

        hddsim_args: extra model options (e.g. ["--rpm", "5400"]); see `build/hddsim --help`.
        progress: optional callable(str) told about slow steps (building the system image).
        fs: the file system (ext4, xfs, btrfs), of an empty image or of the system image (the
        same files written in the same order in each).
        """
        prof = profiles.get(profile)
        if image not in IMAGES:
            raise WarmstartError(f"unknown image {image!r}: use one of {', '.join(IMAGES)}")
        if fs not in images.FILE_SYSTEMS:
            raise WarmstartError(f"unknown file system {fs!r}: use one of {', '.join(images.FILE_SYSTEMS)}")
        if size_mb < images.MIN_SIZE_MB[fs]:
            raise WarmstartError(f"size_mb={size_mb} is too small for {fs}: use "
                                 f"{images.MIN_SIZE_MB[fs]} or more")
        if os.geteuid() != 0:
            raise WarmstartError("emulated disks need root (loop devices, mounts, FUSE): run as root")
        want = {"profile": profile, "image": image, "size_mb": size_mb, "fs": fs,
                "stroke_bytes_arg": stroke_bytes, "hddsim_args": list(hddsim_args)}
        if not fresh:
            try:
                disk = cls.attach(name)
                if all(disk._state.get(k) == v for k, v in want.items()) and disk.healthy():
                    return disk
            except WarmstartError:
                pass
        cls.down_by_name(name)
        sdir = _state_dir(name)
        sdir.mkdir(parents=True, exist_ok=True)
        state = dict(want, name=name, backing=str(images.tmpfs_dir() / f"{name}.img"),
                     mountpoint=str(sdir / "mnt"), fuse_dir=None, hddsim_pid=None, loop_dev=None,
                     chroot=False, stats_base=None)
        try:
            cls._build(state, prof, progress)
        except BaseException:
            # Undo everything built so far, also on Ctrl-C, then report the original problem.
            _write_state(sdir, state)
            cls.down_by_name(name)
            raise
        return cls(state)

    @staticmethod
    def _build(state: dict, prof: profiles.Profile, progress) -> None:
        sdir = _state_dir(state["name"])
        backing = Path(state["backing"])
        if state["image"] == "empty":
            images.make_empty(backing, state["size_mb"], label=state["name"], fs=state["fs"])
        else:
            from . import system_image
            layout = state["image"].partition("-")[2] or "packaged"
            cached = system_image.cached_image(state["size_mb"], progress=progress, layout=layout,
                                               fs=state["fs"])
            images.copy_image(cached, backing)
        image_bytes = backing.stat().st_size
        _write_state(sdir, state)
        if prof.model:
            stroke = state["stroke_bytes_arg"] or profiles.default_stroke(state["image"], image_bytes)
            state["stroke_bytes"] = stroke if prof.model == "hdd7200" else None
            state["fuse_dir"] = str(sdir / "fuse")
            state["hddsim_pid"] = hddsim.start(Path(state["fuse_dir"]), backing, prof.model,
                                               state["stroke_bytes"], state["hddsim_args"],
                                               sdir / "hddsim.log")
            _write_state(sdir, state)
            state["loop_dev"] = sysops.loop_attach(Path(state["fuse_dir"]) / "disk", direct_io=True)
        else:
            state["loop_dev"] = sysops.loop_attach(backing, direct_io=False)
        _write_state(sdir, state)
        sysops.set_queue(state["loop_dev"], prof.rotational, prof.scheduler)
        mnt = Path(state["mountpoint"])
        mnt.mkdir(parents=True, exist_ok=True)
        images.mount(state.get("fs", "ext4"), state["loop_dev"], mnt)
        if state["image"].startswith("system"):
            chroot.mount_api(mnt)
            state["chroot"] = True
        if not prof.model:
            state["stats_base"] = _blockstat(state["loop_dev"])
        _write_state(sdir, state)

    @classmethod
    def attach(cls, name: str) -> "EmuDisk":
        """The disk `name` brought up earlier (by this or another process)."""
        path = _state_dir(name) / "state.json"
        try:
            state = json.loads(path.read_text())
        except FileNotFoundError:
            raise WarmstartError(f"no emulated disk named {name!r}: bring it up with `scripts/emu-disk up --name {name}`")
        except (OSError, ValueError) as e:
            raise WarmstartError(f"cannot read {path}: {e}; run `scripts/emu-disk down --name {name}` and up again")
        if not state.get("loop_dev") or not sysops.is_mounted(Path(state["mountpoint"])):
            raise WarmstartError(f"emulated disk {name!r} is only half up (a crash?): "
                                 f"run `scripts/emu-disk up --name {name}` again")
        return cls(state)

    def healthy(self) -> bool:
        """Everything of the stack still in place: daemon, FUSE mount, loop device, file system mount."""
        if self.fuse_dir is not None:
            if not running(self._state.get("hddsim_pid"), "hddsim"):
                return False
            try:
                hddsim.read_stats(self.fuse_dir)
            except WarmstartError:
                return False
            want_backing = str(self.fuse_dir / "disk")
        else:
            want_backing = str(self.backing)
        return (sysops.loop_backing(self.loop_dev) or "").startswith(want_backing) \
            and sysops.is_mounted(self.mountpoint)

    def down(self) -> None:
        """Tear the whole stack down (safe to call twice)."""
        self.down_by_name(self.name)

    @staticmethod
    def down_by_name(name: str) -> None:
        """Undo everything an `up` of `name` may have done, in reverse order, whatever state it is in."""
        sdir = _state_dir(name)
        try:
            state = json.loads((sdir / "state.json").read_text())
        except (OSError, ValueError):
            state = {}
        backing = Path(state.get("backing") or images.tmpfs_dir() / f"{name}.img")
        fuse_dir = sdir / "fuse"
        # 0. an overlayfs over the disk's file system (it keeps that one busy) and its tmpfs
        sysops.unmount_all_under(sdir / OVERLAY_DIR)
        # 1. the file system and the chroot's /proc, /dev, /tmp mounted inside it
        sysops.unmount_all_under(sdir / "mnt")
        # 2. loop devices on the FUSE file or (profile none) on the image itself
        loops = set(sysops.loops_of(fuse_dir / "disk")) | set(sysops.loops_of(backing))
        if state.get("loop_dev") and (sysops.loop_backing(state["loop_dev"]) or "").startswith(
                (str(fuse_dir / "disk"), str(backing))):
            loops.add(state["loop_dev"])
        for dev in sorted(loops):
            sysops.loop_detach(dev)
        # 3. the disk model
        hddsim.stop(fuse_dir, state.get("hddsim_pid"))
        sysops.unmount_all_under(fuse_dir)
        # 4. files: the tmpfs image and the state
        images.remove(backing)
        for leftover in ("state.json", "hddsim.log"):
            try:
                os.unlink(sdir / leftover)
            except FileNotFoundError:
                pass
        for d in (sdir / OVERLAY_DIR / "merged", sdir / OVERLAY_DIR / "rw", sdir / OVERLAY_DIR,
                  sdir / "mnt", fuse_dir, sdir):
            try:
                d.rmdir()
            except OSError:
                pass

    # ---- use ----------------------------------------------------------------------------

    def stats(self) -> Dict[str, Optional[int]]:
        """Requests that reached the disk since the last reset_stats().

        hdd7200/ssd: counted by the model. none: from the loop device's block-layer counters
        (seeks is None there: nothing models a head).
        """
        if self.fuse_dir is not None:
            s = hddsim.read_stats(self.fuse_dir)
            return {k: s[k] for k in hddsim.STAT_KEYS}
        now, base = _blockstat(self.loop_dev), self._state.get("stats_base") or {}
        d = {k: now[k] - base.get(k, 0) for k in now}
        return {"requests": d["reads"] + d["writes"], "reads": d["reads"], "writes": d["writes"],
                "seeks": None, "bytes_read": d["bytes_read"], "bytes_written": d["bytes_written"],
                "busy_ns": d["busy_ns"]}

    def reset_stats(self) -> None:
        if self.fuse_dir is not None:
            hddsim.reset_stats(self.fuse_dir)
        else:
            self._state["stats_base"] = _blockstat(self.loop_dev)
            _write_state(_state_dir(self.name), self._state)

    def model_info(self) -> Dict[str, float]:
        """The model's derived numbers (avg_seek_ns, full_seek_ns, rev_ns, rate_bps, ...), from hddsim."""
        if self.fuse_dir is None:
            return {}
        return {k: v for k, v in hddsim.read_stats(self.fuse_dir).items() if k not in hddsim.STAT_KEYS}

    @staticmethod
    def drop_caches() -> None:
        """Write back dirty data, then drop the page cache, dentries and inodes (VM-wide)."""
        from ..recorder.coldcache import drop_caches
        drop_caches()

    def chroot_argv(self, argv: List[str], env: Optional[Dict[str, str]] = None,
                    root: Optional[Path] = None) -> List[str]:
        """argv that runs `argv` chrooted in the image (or in root, e.g. overlay()), with a clean
        environment plus `env`."""
        return chroot.argv(root or self.mountpoint, argv, env)

    def overlay(self) -> Path:
        """An overlayfs over this disk's file system, as a container runtime mounts an image: the
        disk's file system is the lower layer, the upper and work dirs are on a tmpfs. Returns its
        mount point (runnable with chroot_argv(..., root=) for a system image); the same one if it
        is already mounted. Change nothing in the lower file system while it is mounted (overlayfs
        leaves that undefined). Torn down with the disk."""
        base = _state_dir(self.name) / OVERLAY_DIR
        rw, merged = base / "rw", base / "merged"
        if sysops.is_mounted(merged):
            return merged
        for d in (rw, merged):
            d.mkdir(parents=True, exist_ok=True)
        if not sysops.is_mounted(rw):
            sysops.run(["mount", "-t", "tmpfs", "-o", "mode=0755,size=256m", "tmpfs", str(rw)],
                       fix="check `dmesg | tail`")
        for d in ("upper", "work"):
            (rw / d).mkdir(exist_ok=True)
        sysops.run(["mount", "-t", "overlay", "overlay", "-o",
                    f"lowerdir={self.mountpoint},upperdir={rw / 'upper'},workdir={rw / 'work'}", str(merged)],
                   fix=f"check `dmesg | tail` (overlayfs over {self.fs} needs a kernel with overlay: modprobe overlay)")
        if self.image.startswith("system"):
            chroot.mount_api(merged)
        return merged


def _write_state(sdir: Path, state: dict) -> None:
    tmp = sdir / "state.json.tmp"
    tmp.write_text(json.dumps(state, indent=1))
    os.replace(tmp, sdir / "state.json")


def _blockstat(dev: str) -> Dict[str, int]:
    """The block layer's counters of dev (Documentation/block/stat.rst)."""
    f = [int(x) for x in Path(f"/sys/block/{os.path.basename(dev)}/stat").read_text().split()]
    return {"reads": f[0], "bytes_read": f[2] * 512, "writes": f[4], "bytes_written": f[6] * 512,
            "busy_ns": f[9] * 1_000_000}


__all__ = ["EmuDisk", "STATE_ROOT"]
