"""Emulated disks: ext4, XFS or btrfs on a loop device whose requests take the time an HDD or SSD model says.

    from warmstart.emudisk import EmuDisk
    d = EmuDisk.up(name="x", profile="hdd7200", image="empty", size_mb=512)
    ...; d.stats(); d.drop_caches(); d.down()

See docs/emulated-disk.md for the model and its parameters.
"""

from .disk import EmuDisk, STATE_ROOT

__all__ = ["EmuDisk", "STATE_ROOT"]
