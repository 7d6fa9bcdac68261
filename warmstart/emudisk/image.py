"""Backing images: a fresh ext4 file, or a copy of the cached aged system image."""

import os
from pathlib import Path

from .sysops import run

# mkfs options: initialise inode tables and journal now, so no ext4lazyinit writes reach the
# emulated disk later and disturb timings.
MKFS_ARGS = ["mkfs.ext4", "-F", "-q", "-E", "lazy_itable_init=0,lazy_journal_init=0"]


def make_empty(path: Path, size_mb: int, label: str = "warmstart") -> None:
    """Create a sparse file of size_mb MiB holding an empty ext4 file system."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "wb") as f:
        f.truncate(size_mb * 1024 * 1024)
    run(MKFS_ARGS + ["-L", label[:16], str(path)], fix="install e2fsprogs (make deps)")


def copy_image(src: Path, dst: Path) -> None:
    """Copy a cached image keeping it sparse (tmpfs holds only the used blocks)."""
    dst.parent.mkdir(parents=True, exist_ok=True)
    tmp = dst.with_name(dst.name + ".part")
    run(["cp", "--sparse=always", str(src), str(tmp)], fix=f"check free space on {dst.parent}")
    os.replace(tmp, dst)


def remove(path: Path) -> None:
    for p in (path, path.with_name(path.name + ".part")):
        try:
            os.unlink(p)
        except FileNotFoundError:
            pass


def tmpfs_dir() -> Path:
    """Where backing images live: tmpfs, so the emulator's own reads never touch the real disk."""
    return Path(os.environ.get("WARMSTART_EMU_TMPFS", "/dev/shm/warmstart-emu"))

