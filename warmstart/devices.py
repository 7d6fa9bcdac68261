"""Block devices as sysfs describes them: one place for dev_t -> sysfs directory, kernel name,
/dev node, partition geometry and rotational flag (the recorder, analyzer, replayer export and
bench all ask these questions)."""

import os
from typing import List, Optional, Tuple


def sysfs_path(dev: int, sys_root: str = "/sys") -> str:
    """/sys/dev/block/MAJOR:MINOR of a block device number (a link into /sys/devices); sys_root
    is another sysfs tree (a test's)."""
    return f"{sys_root}/dev/block/{os.major(dev)}:{os.minor(dev)}"


def block_name(dev: int) -> Optional[str]:
    """The kernel's name of the device ("vda1", "loop0"), or None if it is not present."""
    try:
        return os.path.basename(os.readlink(sysfs_path(dev)))
    except OSError:
        return None


def device_node(dev: int) -> Optional[str]:
    """/dev node of the device, from its uevent (works without udev symlinks); None if absent."""
    try:
        with open(sysfs_path(dev) + "/uevent") as f:
            for line in f:
                if line.startswith("DEVNAME="):
                    return "/dev/" + line.split("=", 1)[1].strip()
    except OSError:
        pass
    return None


def disk_of(dev: int, sys_root: str = "/sys") -> Tuple[int, int]:
    """(whole-disk dev, start sector) of a partition; (dev, 0) for anything else."""
    base = sysfs_path(dev, sys_root)
    try:
        with open(base + "/start") as f:
            start = int(f.read())
        with open(base + "/../dev") as f:
            major, minor = f.read().strip().split(":")
        return os.makedev(int(major), int(minor)), start
    except (OSError, ValueError):
        return dev, 0


def size_bytes(dev: int, sys_root: str = "/sys") -> int:
    """Size of block device dev in bytes (sysfs counts 512-byte sectors), 0 if unknown."""
    try:
        with open(sysfs_path(dev, sys_root) + "/size") as f:
            return int(f.read()) * 512
    except (OSError, ValueError):
        return 0


def rotational(dev: int) -> Optional[bool]:
    """The kernel's queue/rotational of the disk holding dev (a partition's parent), or None."""
    base = sysfs_path(dev)
    for q in (f"{base}/queue/rotational", f"{base}/../queue/rotational"):
        try:
            with open(q) as f:
                return f.read().strip() == "1"
        except OSError:
            continue
    return None


def is_block_device(dev: int) -> bool:
    """Is dev a block device present here (not an anonymous device such as btrfs's or
    overlayfs's 0:N)?"""
    return os.major(dev) != 0 and os.path.exists(sysfs_path(dev))


def slaves(dev: int, sys_root: str = "/sys") -> List[int]:
    """The block devices directly under a stacked device (dm-crypt, LVM, md: its
    /sys/block/NAME/slaves; a partition's slaves are its disk's). [] for a plain disk."""
    base = sysfs_path(dev, sys_root)
    out = []
    try:
        names = sorted(os.listdir(base + "/slaves"))
    except OSError:
        return out
    for name in names:
        try:
            with open(f"{base}/slaves/{name}/dev") as f:
                major, minor = f.read().strip().split(":")
            out.append(os.makedev(int(major), int(minor)))
        except (OSError, ValueError):
            continue
    return out


def stack_below(dev: int, sys_root: str = "/sys") -> List[int]:
    """Every device under dev in its stack (dm over md over partitions ...), nearest first; a
    request queued on dev is queued again on these (remapped), so it must count once."""
    out: List[int] = []
    todo = [dev]
    while todo:
        for s in slaves(todo.pop(0), sys_root):
            if s not in out and s != dev:
                out.append(s)
                todo.append(s)
    return out
