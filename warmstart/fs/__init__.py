"""What differs per file system, in one place: one module per file system answers the same few
questions through FileSystem, chosen by the mount's fstype (mountinfo):

  devices()      the block devices holding its data (ext4/XFS: the mounted device; btrfs: its
                 device list; overlay: none of its own, its files live on the layers)
  cannot_map()   why none of its files can be placed on a disk (tmpfs, FUSE, ...), or None
  cache_key()    the (dev, ino) under which the kernel's page-cache events name a file
                 (btrfs: the file system's dev, not the subvolume's st_dev)
  real_path()    the file whose page cache a path's reads fill (overlay: the layer's file)
  extents(fd)    the file's mapped extents, physical = byte offset on data_device()
                 (btrfs: logical addresses translated through the chunk tree)

  metadata       how its metadata is warmed: "bdev" (raw reads of the block device: ext2/3/4)
                 or "fs" (through the file system; fs/metadata.py has the policy built on it)
  inode_clusters(s, n)  the inode numbers whose lookup reads those sectors (XFS: inode clusters;
                 btrfs: the leaves of its subvolume tree, read back from the device)
  metadata_positions(entries)  where a lookup of each file reads its inode (XFS: from the number;
                 btrfs: its tree, as copy-on-write moves leaves)
  step_order(entries)  the metadata step's order: by those places (btrfs: the directories
                 first where that is predicted to save seeks)
  step_sweeps    whether the step takes each entry only after its directory, sweep after sweep
                 up the places (XFS), or at its place (the others)
  lookup_event   its tracepoint naming each lookup that misses the dentry cache (XFS), and
                 parse_lookup() of its text: what the recorder traces (lookup_parsers)

Adding a file system is one module here plus a line in _register.
"""

import os
from typing import Callable, Dict, List, Optional, Tuple

from ..mountinfo import Mount, mount_of_path, mounts
from .generic import FileSystem

KINDS = {}   # fstype -> FileSystem subclass; filled below


def _register() -> None:
    from .btrfs import Btrfs
    from .ext4 import Ext4
    from .overlay import Overlay
    from .xfs import Xfs
    for cls in (Ext4, Xfs, Btrfs, Overlay):
        for t in cls.fstypes:
            KINDS[t] = cls


def lookup_parsers() -> Dict[str, Callable[[bytes], Optional[Tuple[int, int, bytes]]]]:
    """Every file system's lookup tracepoint ("system/event") -> its parser (FileSystem.lookup_event)."""
    if not KINDS:
        _register()
    return {cls.lookup_event: cls.parse_lookup for cls in set(KINDS.values()) if cls.lookup_event}


def kind(fstype: Optional[str]) -> type:
    """The FileSystem class of an fstype (unknown types: the generic one)."""
    if not KINDS:
        _register()
    return KINDS.get(fstype or "", FileSystem)


def for_mount(mount: Mount, table: "Optional[FileSystems]" = None) -> FileSystem:
    """The FileSystem of a mount, by its fstype."""
    return kind(mount.fstype)(mount, table)


class FileSystems:
    """This mount namespace's file systems, read once: by page-cache dev, and by path."""

    def __init__(self, mount_list: Optional[List[Mount]] = None):
        self.mounts = mounts() if mount_list is None else mount_list
        self._by_dev: Dict[int, FileSystem] = {}
        for m in sorted(self.mounts, key=lambda m: m.root != b"/"):   # mounts of the fs root first
            if m.dev not in self._by_dev:
                self._by_dev[m.dev] = for_mount(m, self)

    def items(self):
        """(dev, FileSystem) of every file system mounted here."""
        return self._by_dev.items()

    def of_dev(self, dev: int) -> Optional[FileSystem]:
        """The file system whose page-cache events carry dev, None if none is mounted here."""
        return self._by_dev.get(dev)

    def of_path(self, path: bytes) -> Optional[FileSystem]:
        """The file system holding path (absolute, symlinks resolved)."""
        m = mount_of_path(path, self.mounts)
        return None if m is None else self._by_dev.get(m.dev) or for_mount(m, self)

    def cache_key_of(self, path, st: os.stat_result) -> Tuple[int, int]:
        """(dev, ino) under which the page cache names the file at path (stat st): not always
        st_dev (btrfs: the file system's dev, not the subvolume's; overlayfs: the layer's file);
        st's own where no mounted file system holds it."""
        found = self.key_and_real(os.fsencode(path))
        return (st.st_dev, st.st_ino) if found is None else found[0]

    def key_and_real(self, path: bytes) -> Optional[Tuple[Tuple[int, int], bytes, os.stat_result]]:
        """((dev, ino) of the page cache, the real file's path, its stat) of the file at path;
        None if it is gone or on no mounted file system."""
        path = os.path.realpath(path)
        fs = self.of_path(path)
        if fs is None:
            return None
        real = fs.real_path(path)
        if real != path:
            return self.key_and_real(real) if real is not None else None
        try:
            st = os.stat(path)
        except OSError:
            return None
        return fs.cache_key(path, st), path, st


def fs_mount_points(table: Optional[FileSystems] = None) -> List[bytes]:
    """One mount point per file system that can hold a launch's file data (a block device's, or
    an overlay's): where the opens of a launch are watched."""
    table = table or FileSystems()
    out = []
    for dev, fs in table.items():
        if fs.cannot_map() is None:
            out.append(fs.mount.target)
    return out
