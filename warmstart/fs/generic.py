"""The generic file system: the page cache names files by (st_dev, ino), FIEMAP (if it has one)
answers offsets on the mounted block device, metadata is warmed through the file system. Any
fstype without a module of its own is this."""

import os
import stat
from typing import TYPE_CHECKING, Dict, List, Optional, Tuple

from ..devices import is_block_device
from ..fiemap import mapped_extents_fd
from ..model import Extent

if TYPE_CHECKING:
    from ..mountinfo import Mount


class FileSystem:
    fstypes: Tuple[str, ...] = ()
    name = "generic"
    # how its metadata is warmed before a launch (fs/metadata.py): "fs", through the file system
    # (its own caches, which reads of the block device do not fill), unless a module says "bdev"
    metadata = "fs"
    # "fs" metadata: does the replayer's metadata step read each directory on a scheduled path
    # whole (getdents), or only look the names up? Whole where a listing is a cheap sequential
    # read and spares the app's own listings; lookups only where it is not (docs/replayer.md)
    list_dirs = False
    # "fs" metadata with places (metadata_positions): does the metadata step take an entry whose
    # directory it has not warmed yet in a later sweep up the places (WSR_FILE_AFTER_DIR), rather
    # than where its place is, its lookup reading that directory out of order? Sweeps where each
    # directory's metadata lies near its own place (XFS), not where the places already model the
    # lookups' reads (btrfs: Btrfs.step_order); docs/replayer.md has both measured
    step_sweeps = False
    # a tracepoint of its own that names every lookup missing the dentry cache ("system/event"),
    # or None: the recorder traces it (recorder.lookups), so that the metadata step can read the
    # directories the launch looked names up in that no scheduled path passes (parse_lookup)
    lookup_event: Optional[str] = None
    # does the metadata step's seek of a scheduled file's ranges (SEEK_DATA) read the cluster of
    # its inode (inode_clusters) even when the inode is in memory? Then that cluster needs no
    # name looked up for it (FileMap.inode_lookups)
    seeks_read_inode_cluster = False

    def __init__(self, mount: "Mount", table=None):
        self.mount = mount
        self.table = table     # the FileSystems it was found in (overlay asks it for its layers)

    @property
    def dev(self) -> int:
        """The dev_t its page-cache events carry (the superblock's)."""
        return self.mount.dev

    def devices(self) -> List[int]:
        """Block devices holding its data: the mounted one (its dev, or the source's node)."""
        if is_block_device(self.mount.dev):
            return [self.mount.dev]
        try:
            st = os.stat(self.mount.source)
        except (OSError, ValueError):
            return []
        return [st.st_rdev] if stat.S_ISBLK(st.st_mode) and is_block_device(st.st_rdev) else []

    def data_device(self) -> Optional[int]:
        """The block device extents() addresses (None: no block device)."""
        devs = self.devices()
        return devs[0] if devs else None

    def release_pinned_metadata(self) -> Optional[str]:
        """Let drop_caches drop the metadata blocks the file system still holds after a sync (a
        journal's: recorder/coldcache.release_pinned); None once done or where there is nothing
        to do, else why it could not be done. Nothing here."""
        return None

    def cannot_map(self) -> Optional[str]:
        """Why its files cannot be placed on a disk, or None if they can."""
        if not self.devices():
            return f"{self.mount.fstype} file system ({os.fsdecode(self.mount.source)}) has no block device"
        return None

    def cache_key(self, path: bytes, st: os.stat_result) -> Tuple[int, int]:
        """(dev, ino) under which the page-cache events name the file at path."""
        return self.dev, st.st_ino

    def real_path(self, path: bytes) -> Optional[bytes]:
        """The file whose page cache reads of path fill (itself, here)."""
        return path

    def extents(self, fd: int) -> List[Extent]:
        """Mapped extents of the open file, physical = bytes on data_device(). Raises OSError."""
        return mapped_extents_fd(fd)

    def inline_data_places(self, entries: List[Tuple[bytes, os.stat_result]]) -> Dict[Tuple[int, int], int]:
        """Files whose data the file system keeps in its metadata (FIEMAP's DATA_INLINE: no
        extent to read): where on data_device() each (path, its stat)'s data is read from, by
        (st_dev, ino). The metadata step's seek of such a file reads that block, its data with
        it. {} where not known: such a file is then left out of the schedule, as before."""
        return {}

    @staticmethod
    def parse_lookup(body: bytes) -> Optional[Tuple[int, int, bytes]]:
        """(dev_t, directory inode, name) of one lookup_event's text, or None."""
        return None

    def metadata_positions(self, entries: List[Tuple[bytes, os.stat_result]]) -> Dict[Tuple[int, int], int]:
        """(st_dev, ino) -> where the metadata step's lookup of each (path, lstat) reads its inode
        (a byte offset on data_device()): the step visits the entries it has places for in one
        pass by place. {} where it cannot say: the step then visits the files it only looks up
        first, then the rest, each in inode order."""
        return {}

    def step_order(self, entries: List[Tuple[bytes, os.stat_result]]) -> Dict[Tuple[int, int], int]:
        """(st_dev, ino) -> the metadata step's order key of each (path, lstat): the step visits
        the entries that have one in one pass by key (FILE.meta_pos). Where its lookups read
        (metadata_positions) unless the file system knows a better order (btrfs)."""
        return self.metadata_positions(entries)

    def inode_clusters(self, sector: int, nr_sectors: int) -> List[Tuple[int, int]]:
        """Where the file system places inodes by number: the inode numbers [first, end) of each
        inode cluster (the unit it reads inodes in) in those sectors of data_device(), so that a
        lookup of any one of a cluster's inodes reads that cluster into its cache; [] where it
        does not or cannot say."""
        return []
