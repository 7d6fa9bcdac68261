"""Backing images: a fresh file system (ext4, XFS or btrfs) in a file, or a copy of the cached
aged system image."""

import fcntl
import os
import shutil
import subprocess
import time
from pathlib import Path

from ..errors import WarmstartError
from .sysops import is_mounted, run

# mkfs command lines per file system, with the Debian package that has the program. ext4:
# initialise inode tables and journal now, so no ext4lazyinit writes reach the emulated disk later
# and disturb timings. XFS labels hold 12 bytes, ext4's and btrfs's more.
MKFS = {
    "ext4": (["mkfs.ext4", "-F", "-q", "-E", "lazy_itable_init=0,lazy_journal_init=0", "-L"], 16, "e2fsprogs"),
    "xfs": (["mkfs.xfs", "-f", "-q", "-L"], 12, "xfsprogs"),
    "btrfs": (["mkfs.btrfs", "-f", "-q", "-L"], 16, "btrfs-progs"),
}
FILE_SYSTEMS = tuple(MKFS)
# the smallest image each mkfs accepts (xfsprogs 5.x: 300 MiB for a data file system)
MIN_SIZE_MB = {"ext4": 16, "xfs": 300, "btrfs": 128}


def make_empty(path: Path, size_mb: int, label: str = "warmstart", fs: str = "ext4") -> None:
    """Create a sparse file of size_mb MiB holding an empty file system of type fs."""
    argv, label_max, package = MKFS[fs]
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "wb") as f:
        f.truncate(size_mb * 1024 * 1024)
    run(argv + [label[:label_max], str(path)], fix=f"install {package} (make deps)")


# Mount options per file system. XFS refuses a second file system with the same UUID, and copies
# of one cached system image (a bench's disk and a test's, say) share it: nouuid lets them mount
# side by side. btrfs mounts such clones on its own (a temporary fsid, kernel 6.7+).
MOUNT_OPTIONS = {"xfs": ["-o", "nouuid"]}


def mount(fs: str, dev: str, target: Path) -> None:
    """Mount the file system fs on dev at target."""
    run(["mount", "-t", fs, *MOUNT_OPTIONS.get(fs, []), dev, str(target)],
        fix=f"check `dmesg | tail` for the {fs} error")


def copy_image(src: Path, dst: Path) -> None:
    """Copy a cached image keeping it sparse (tmpfs holds only the used blocks), from its copy
    in tmpfs (staged()): a disk comes up after caches were dropped, and reading the image back
    from the host's disk took 3-4 s of each bring-up (0.4-0.8 s from tmpfs)."""
    dst.parent.mkdir(parents=True, exist_ok=True)
    tmp = dst.with_name(dst.name + ".part")
    run(["cp", "--sparse=always", str(staged(src)), str(tmp)], fix=f"check free space on {dst.parent}")
    os.replace(tmp, dst)


def staged_budget() -> int:
    """Bytes of tmpfs the staged images may hold: 4 GiB, at most a quarter of the RAM."""
    return min(4 << 30, os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE") // 4)


def staged(src: Path) -> Path:
    """The tmpfs copy of the cached image src (made now if missing or older than src), which
    drop_caches leaves in memory. The least recently used copies beyond staged_budget() are
    removed (a disk copying from one keeps its open file)."""
    stage = tmpfs_dir() / "images"
    path = stage / src.name
    st = src.stat()
    try:
        have = path.stat()
        fresh = have.st_size == st.st_size and have.st_mtime_ns >= st.st_mtime_ns
    except FileNotFoundError:
        fresh = False
    if not fresh:
        stage.mkdir(parents=True, exist_ok=True)
        tmp = stage / f".{src.name}.{os.getpid()}"
        run(["cp", "--sparse=always", str(src), str(tmp)], fix=f"check free space on {stage}")
        os.replace(tmp, path)
    now = time.time_ns()
    os.utime(path, ns=(now, now))   # its last use: the eviction order (the clock's ns, not a file system tick)
    copies = []
    for other in stage.glob("*.img"):
        try:
            copies.append((other.stat(), other))
        except FileNotFoundError:   # another bring-up removed it
            pass
    kept, budget = 0, staged_budget()
    for st_other, other in sorted(copies, key=lambda c: c[0].st_mtime_ns, reverse=True):
        kept += st_other.st_blocks * 512
        if other != path and kept > budget:
            remove(other)
    return path


def remove(path: Path) -> None:
    for p in (path, path.with_name(path.name + ".part")):
        try:
            os.unlink(p)
        except FileNotFoundError:
            pass


TMPFS = Path("/run/warmstart-emu-mem")
LEGACY_TMPFS = Path("/dev/shm/warmstart-emu")   # before the tmpfs of its own: its staged copies go
# Large pages: every drop_caches walks the cached pages of every file, tmpfs ones too, which it
# cannot drop; with the three system images staged, each drop took 0.12-0.13 s of the caller's
# time in 4 KiB pages, 0.02-0.03 s in this tmpfs's (docs/emulated-disk.md). Holes stay holes (a
# page is allocated where the file is written).
TMPFS_OPTIONS = ("mode=0755,huge=within_size", "mode=0755")   # the second: a kernel without THP


def tmpfs_dir() -> Path:
    """Where backing images live: in memory, so the emulator's own reads never touch the real
    disk. WARMSTART_EMU_TMPFS names any directory, used as it is; else a tmpfs of its own with
    huge pages (TMPFS), mounted by the first caller."""
    env = os.environ.get("WARMSTART_EMU_TMPFS")
    if env:
        return Path(env)
    if not is_mounted(TMPFS):
        _mount_tmpfs()
    return TMPFS


def _mount_tmpfs() -> None:
    TMPFS.mkdir(parents=True, exist_ok=True)
    with open(TMPFS.with_name(TMPFS.name + ".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)      # two first callers: one mount, not one hiding the other
        if is_mounted(TMPFS):
            return
        for options in TMPFS_OPTIONS:
            p = subprocess.run(["mount", "-t", "tmpfs", "-o", options, "warmstart-emu", str(TMPFS)],
                               capture_output=True)
            if p.returncode == 0:
                break
        else:
            raise WarmstartError(f"cannot mount a tmpfs on {TMPFS} for the emulated disks' images: "
                                 f"{p.stderr.decode(errors='replace').strip()}; run as root, "
                                 f"or set WARMSTART_EMU_TMPFS to a directory on a tmpfs")
    shutil.rmtree(LEGACY_TMPFS / "images", ignore_errors=True)

