"""Block devices as sysfs describes them: one place for dev_t -> sysfs directory, kernel name,
/dev node, partition geometry and rotational flag (the recorder, analyzer, replayer export and
bench all ask these questions)."""

import os
from typing import Optional, Tuple


def sysfs_path(dev: int) -> str:
    """/sys/dev/block/MAJOR:MINOR of a block device number (a link into /sys/devices)."""
    return f"/sys/dev/block/{os.major(dev)}:{os.minor(dev)}"


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


def disk_of(dev: int) -> Tuple[int, int]:
    """(whole-disk dev, start sector) of a partition; (dev, 0) for anything else."""
    base = sysfs_path(dev)
    try:
        with open(base + "/start") as f:
            start = int(f.read())
        with open(base + "/../dev") as f:
            major, minor = f.read().strip().split(":")
        return os.makedev(int(major), int(minor)), start
    except (OSError, ValueError):
        return dev, 0


def size_bytes(dev: int) -> int:
    """Size of block device dev in bytes (sysfs counts 512-byte sectors), 0 if unknown."""
    try:
        with open(sysfs_path(dev) + "/size") as f:
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
