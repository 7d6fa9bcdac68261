"""How each file system's metadata is warmed before a launch: the policy built on each file
system module's answer (FileSystem.metadata).

- "bdev": the metadata a cold open() reads (inode tables, extent trees, directory blocks) lives
  in the block device's page cache, so raw reads of the device by LBA warm it. ext2/3/4 read
  their metadata through buffer heads of the block device's mapping: the analyzer schedules those
  blocks as device ranges (analyzer/ext4meta.py, and the launch's unmapped REQ_META reads).
- "fs": the file system keeps metadata in caches of its own (XFS's buffer cache, btrfs's extent
  buffers on its btree inode, overlayfs's inodes over the lower layer's): a read of the block
  device fills pages nothing looks at. It is warmed through the file system instead: the replayer's
  metadata step looks up each scheduled file and every directory on its path, reading the
  directories whole where the file system's module says so (WSR_FILE_WARM_META, WSR_KIND_DIR,
  replayer/fsmeta.c). This is also the answer for any file system not known here, and for a
  device no mount names (btrfs's anonymous st_dev): a raw read never helps where we cannot tell.

overlay: the lower file system decides what can: its files' st_dev is the overlay's own, so
their metadata cannot be found by LBA from it, and they are warmed through the overlay, whose
lookups and listings warm the lower layer's inodes and directories whatever file system holds
them; the raw reads a launch made of the lower layer's device are judged by that device's own
mount (RawReadPolicy: kept on an ext4 lower layer, dropped on XFS or btrfs).
"""

import os
import stat
from typing import Dict, Iterable, List, Optional, Tuple

from ..devices import device_node, disk_of, size_bytes
from ..mountinfo import Mount, mounts

BDEV, FS = "bdev", "fs"


def metadata_mode(fstype: Optional[str]) -> str:
    """"bdev" when reading the block device warms the file system's metadata, else "fs" (each
    file system's module says which: FileSystem.metadata)."""
    from . import kind
    return kind(fstype).metadata


def fstypes(mount_list: Optional[List[Mount]] = None) -> Dict[int, str]:
    """st_dev -> fstype of every mounted file system (the first mount of a device names it)."""
    out: Dict[int, str] = {}
    for m in mount_list if mount_list is not None else mounts():
        out.setdefault(m.dev, m.fstype)
    return out


def modes(devs: Iterable[int], mount_list: Optional[List[Mount]] = None) -> Dict[int, str]:
    """st_dev -> metadata mode for each of devs; a device no mount names is "fs"."""
    types = fstypes(mount_list)
    return {d: metadata_mode(types.get(d)) for d in devs}


def warm_through_fs(devs: Iterable[int], mount_list: Optional[List[Mount]] = None) -> List[int]:
    """Those of devs (st_dev of scheduled files) whose metadata the replayer is to warm through
    the file system (sorted: a schedule stores it, `fs_metadata_devs`, and its export marks those
    files WSR_FILE_WARM_META)."""
    return sorted(d for d, m in modes(devs, mount_list).items() if m == FS)


def directories_on(paths: Iterable[bytes]) -> List[Tuple[bytes, os.stat_result]]:
    """The directories on these paths ("/" and every parent), sorted by name, with their lstat as
    of now: what the replayer's metadata step looks up before the paths themselves. One that is
    gone or no directory now is left out."""
    names = sorted({d for p in paths for d in parents_of(p)})
    found = []
    for d in names:
        try:
            st = os.lstat(d)
        except OSError:
            continue
        if stat.S_ISDIR(st.st_mode):
            found.append((d, st))
    return found


def parents_of(path: bytes) -> List[bytes]:
    """"/" and every parent directory of `path` (a path ending in "/" names itself too)."""
    return [path[:i] or b"/" for i in range(len(path)) if path[i:i + 1] == b"/"]


def position_key(dev: int, ino: int) -> str:
    """How step_positions names an inode (a JSON object's key: a schedule's params store them)."""
    return f"{dev}:{ino}"


def step_positions(paths: Iterable[bytes], table=None) -> Dict[str, int]:
    """"st_dev:ino" -> the metadata step's order key of each of these paths and of each
    directory on them (a path ending in "/" names its directory), from the file systems that can
    say (FileSystem.step_order: where its lookup reads its inode, XFS from the inode number,
    btrfs from its tree, where copy-on-write moved the leaves; btrfs may put the directories
    first), as of now. The export hands it to the step, which visits each device's entries in
    that order (WSR FILE.meta_pos) and the rest in inode order."""
    from . import FileSystems
    table = table or FileSystems()
    entries = directories_on(paths)
    for p in paths:
        if not p.endswith(b"/"):
            try:
                entries.append((p, os.lstat(p)))
            except OSError:
                pass
    groups: Dict[int, Tuple[object, List[Tuple[bytes, os.stat_result]]]] = {}
    for path, st in entries:
        fsys = table.of_path(path)
        if fsys is not None:
            groups.setdefault(fsys.mount.dev, (fsys, []))[1].append((path, st))
    return {position_key(dev, ino): pos for fsys, group in groups.values()
            for (dev, ino), pos in fsys.step_order(group).items()}


def schedule_step_positions(marked: List[bytes], lookup_dirs: Iterable, table=None) -> Dict[str, int]:
    """step_positions of a schedule's entries in the metadata step: its marked files (those whose
    metadata is warmed through their file system), the directories the launch looked names up
    in (`lookup_dirs`), and the directories on their paths. {} without marked files."""
    if not marked:
        return {}
    return step_positions(list(marked) + [os.fsencode(d).rstrip(b"/") + b"/" for d in lookup_dirs], table)


def listed_dirs(devs: Iterable[int], mount_list: Optional[List[Mount]] = None) -> List[int]:
    """Those of devs (st_dev of directories) whose file system the metadata step reads
    directories of whole (FileSystem.list_dirs); a device no mount names is not."""
    return _devs_whose(devs, "list_dirs", mount_list)


def swept_devs(devs: Iterable[int], mount_list: Optional[List[Mount]] = None) -> List[int]:
    """Those of devs (st_dev of files and directories) whose file system's entries the metadata
    step warms after their directories, sweep after sweep (FileSystem.step_sweeps); a device no
    mount names is not."""
    return _devs_whose(devs, "step_sweeps", mount_list)


def _devs_whose(devs: Iterable[int], attr: str, mount_list: Optional[List[Mount]]) -> List[int]:
    from . import kind
    types = fstypes(mount_list)
    return sorted(d for d in devs if d in types and getattr(kind(types[d]), attr))


class RawReadPolicy:
    """Where a raw block-device range (a launch's unmapped read: metadata, or data of no file)
    can help: only inside a block device, or the part of a disk, holding a "bdev" file system.
    Everywhere else (XFS, btrfs, a device no mount names) it fills a cache nothing reads."""

    def __init__(self, mount_list: Optional[List[Mount]] = None):
        from . import FileSystems
        self.fss = FileSystems(mount_list)                     # the mounts it was built from
        self._areas: Dict[int, List[Tuple[int, int]]] = {}     # block dev -> sector spans ("bdev")
        self._own_cache: Dict[int, List[Tuple[int, int]]] = {}  # block dev -> spans of "fs" file systems
        self.fstype: Dict[int, str] = {}                      # block dev -> the fs seen on it
        self._unreadable: Dict[int, Optional[str]] = {}       # block dev -> why it cannot be read
        for dev0, fsys in self.fss.items():
            # its block devices: the mount's own, and those its module names (btrfs: its device
            # list; its mount's st_dev is an anonymous device no block request carries)
            own = [dev0] if os.major(dev0) != 0 else []
            for dev in own + [d for d in fsys.devices() if d not in own]:
                _add_area(self._areas if fsys.metadata == BDEV else self._own_cache, self.fstype, dev, fsys.mount.fstype)

    def helps(self, dev: int, sector: int) -> bool:
        """Whether reading `sector` of block device `dev` can warm a mounted file system (and
        the device can be read at all: some machines refuse opens of their root disk's node)."""
        return _inside(self._areas, dev, sector) and self._readable(dev) is None

    def warmed_through_fs(self, dev: int, sector: int) -> bool:
        """Whether `sector` of block device `dev` lies in a file system whose metadata the
        replayer's metadata step warms through the file system (XFS, btrfs): a launch's raw read
        there is that step's work, not a range to schedule (analyzer.access.metadata_step)."""
        return _inside(self._own_cache, dev, sector)

    def _readable(self, dev: int) -> Optional[str]:
        """None if dev's node opens for reading, else why not (asked once per device)."""
        if dev not in self._unreadable:
            node = device_node(dev)
            why = None if node else "no device node"
            try:
                if node:
                    os.close(os.open(node, os.O_RDONLY | os.O_CLOEXEC | os.O_NONBLOCK))
            except OSError as e:
                why = f"cannot read {node}: {e.strerror}"
            self._unreadable[dev] = why
        return self._unreadable[dev]

    def why_not(self, dev: int) -> str:
        """The reason raw ranges of `dev` are not scheduled (for the analysis report)."""
        if dev in self._areas and self._readable(dev):
            return f"{self._readable(dev)}: raw reads of it cannot be made here"
        fs = self.fstype.get(dev)
        if fs is None:
            return "no mounted file system on this device (btrfs and stacked devices show none): raw reads help nothing"
        return f"{fs} keeps its metadata in its own cache: warmed through the file system instead"


def _add_area(areas: Dict[int, List[Tuple[int, int]]], fstype: Dict[int, str], dev: int, name: str) -> None:
    """Block device dev holds file system `name`: all of dev, and its span of the whole disk."""
    disk, start = disk_of(dev)
    fstype.setdefault(dev, name)
    fstype.setdefault(disk, name)
    areas.setdefault(dev, []).append((0, 1 << 62))
    if disk != dev:
        end = start + size_bytes(dev) // 512 if size_bytes(dev) else 1 << 62
        areas.setdefault(disk, []).append((start, end))


def _inside(areas: Dict[int, List[Tuple[int, int]]], dev: int, sector: int) -> bool:
    return any(a <= sector < b for a, b in areas.get(dev, ()))
