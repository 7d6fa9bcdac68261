"""btrfs: the page-cache events name a file by the file system's anonymous dev (0:N, as in
mountinfo), while stat answers the subvolume's own anonymous dev, and inode numbers restart in
every subvolume. Its data sits on the devices of its device list (BTRFS_IOC_FS_INFO/DEV_INFO),
and FIEMAP answers btrfs *logical* addresses, mapped here to device offsets through the chunk
tree (BTRFS_IOC_TREE_SEARCH on tree 3: each chunk item's stripes give devid and physical offset).

Profiles: single, DUP and RAID1/1C3/1C4 read from the first stripe (a read is served by one
copy; DUP's copies lie on the same device); RAID0 is striped by stripe_len; RAID10/5/6 are not
mapped (their extents are left out, and counted by unmapped_extents). Extents on another device
than data_device() (a multi-device file system) are left out the same way.
metadata: warmed through the file system (FileSystem.metadata "fs"; fs/metadata.py), directories
by lookups only: a directory's index items fill leaves of their own, scattered by copy-on-write,
so reading directories whole cost more than it spared (python on the emulated hdd7200: 333 ms
with its 49 directories read whole, 213 ms with lookups only; FileSystem.list_dirs). The
replayer's step also seeks each range of a file it reads, for the file extent items
(replayer/fsmeta.c)."""

import fcntl
import os
import re
import struct
from functools import cached_property
from typing import Dict, List, NamedTuple, Optional, Tuple

from ..devices import device_node, is_block_device
from ..model import Extent
from .generic import FileSystem

BTRFS_IOC_TREE_SEARCH = 0xD0009411
BTRFS_IOC_DEV_INFO = 0xD000941E
BTRFS_IOC_FS_INFO = 0x8400941F
CHUNK_TREE = 3
FIRST_CHUNK_TREE_OBJECTID = 256
CHUNK_ITEM_KEY = 228
RAID0, RAID1, DUP, RAID10, RAID5, RAID6, RAID1C3, RAID1C4 = 8, 16, 32, 64, 128, 256, 512, 1024
_KEY = struct.Struct("=7Q4I4Q")           # btrfs_ioctl_search_key (104 bytes)
_HDR = struct.Struct("=3Q2I")             # btrfs_ioctl_search_header
_CHUNK = struct.Struct("=4Q3I2H")         # btrfs_chunk without its stripes
_STRIPE = struct.Struct("=2Q16s")         # btrfs_stripe
SEARCH_BUF = 4096 - _KEY.size
# a tree block's header (struct btrfs_header): csum[32] fsid[16] bytenr flags chunk_tree_uuid[16]
# generation owner nritems level; then a leaf's items (struct btrfs_item: key objectid, type,
# offset; data offset, size)
_HEADER = struct.Struct("<32s16sQQ16sQQIB")
_ITEM = struct.Struct("<QBQII")
INODE_ITEM_KEY = 1
FS_TREE = 5


class Chunk(NamedTuple):
    logical: int
    length: int
    stripe_len: int
    type: int
    stripes: Tuple[Tuple[int, int], ...]   # (devid, physical offset)


def read_chunks(fd: int) -> List[Chunk]:
    """Every chunk item of the chunk tree of the btrfs file system of fd. Needs CAP_SYS_ADMIN."""
    out: List[Chunk] = []
    min_offset = 0
    while True:
        buf = bytearray(4096)
        _KEY.pack_into(buf, 0, CHUNK_TREE, FIRST_CHUNK_TREE_OBJECTID, FIRST_CHUNK_TREE_OBJECTID,
                       min_offset, 2 ** 64 - 1, 0, 2 ** 64 - 1, CHUNK_ITEM_KEY, CHUNK_ITEM_KEY, 4096, 0, 0, 0, 0, 0)
        fcntl.ioctl(fd, BTRFS_IOC_TREE_SEARCH, buf, True)
        n = _KEY.unpack_from(buf, 0)[9]
        if n == 0:
            return out
        pos = _KEY.size
        for _ in range(n):
            _, _, offset, typ, length = _HDR.unpack_from(buf, pos)
            pos += _HDR.size
            if typ == CHUNK_ITEM_KEY:
                c_len, _, stripe_len, c_type, _, _, _, num_stripes, _ = _CHUNK.unpack_from(buf, pos)
                stripes = tuple(_STRIPE.unpack_from(buf, pos + _CHUNK.size + i * _STRIPE.size)[:2]
                                for i in range(num_stripes))
                out.append(Chunk(offset, c_len, stripe_len, c_type, stripes))
            pos += length
            min_offset = offset + 1
        if min_offset >= 2 ** 64 - 1:
            return out


def to_physical(chunks: List[Chunk], logical: int) -> Optional[Tuple[int, int, int]]:
    """(devid, physical byte offset, bytes contiguous from there within the chunk's stripe) of a
    logical address; None if no chunk holds it or its profile is not mapped here."""
    lo, hi = 0, len(chunks)
    while lo < hi:
        mid = (lo + hi) // 2
        if chunks[mid].logical <= logical:
            lo = mid + 1
        else:
            hi = mid
    if lo == 0:
        return None
    c = chunks[lo - 1]
    off = logical - c.logical
    if off >= c.length or not c.stripes:
        return None
    if c.type & (RAID10 | RAID5 | RAID6):
        return None
    if c.type & RAID0:
        nr, within = divmod(off, c.stripe_len)
        devid, phys = c.stripes[nr % len(c.stripes)]
        return devid, phys + (nr // len(c.stripes)) * c.stripe_len + within, c.stripe_len - within
    devid, phys = c.stripes[0]          # single, DUP, RAID1*: the first copy
    return devid, phys + off, c.length - off


def translate(chunks: List[Chunk], extents: List[Extent], devid: int) -> Tuple[List[Extent], int]:
    """FIEMAP extents (logical addresses) as extents on device devid, split at chunk/stripe
    boundaries; and the bytes left out (on no mapped chunk, or on another device)."""
    out: List[Extent] = []
    left_out = 0
    for e in extents:
        done = 0
        while done < e.length:
            hit = to_physical(chunks, e.physical + done)
            if hit is None:
                left_out += e.length - done
                break
            dev, phys, span = hit
            n = min(span, e.length - done)
            if dev == devid:
                prev = out[-1] if out else None
                if prev and prev.logical + prev.length == e.logical + done and prev.physical + prev.length == phys:
                    out[-1] = Extent(prev.logical, prev.physical, prev.length + n, prev.flags)
                else:
                    out.append(Extent(e.logical + done, phys, n, e.flags))
            else:
                left_out += n
            done += n
    return out, left_out


def device_list(fd: int) -> Dict[int, bytes]:
    """devid -> device path of the btrfs file system of fd (BTRFS_IOC_FS_INFO, DEV_INFO)."""
    info = bytearray(1024)
    fcntl.ioctl(fd, BTRFS_IOC_FS_INFO, info, True)
    max_id = struct.unpack_from("=Q", info, 0)[0]
    out = {}
    for devid in range(1, max_id + 1):
        arg = bytearray(4096)
        struct.pack_into("=Q", arg, 0, devid)
        try:
            fcntl.ioctl(fd, BTRFS_IOC_DEV_INFO, arg, True)
        except OSError:
            continue    # a hole in the devid sequence (a removed device)
        out[devid] = bytes(arg[3072:]).split(b"\0", 1)[0]
    return out


class Btrfs(FileSystem):
    fstypes = ("btrfs",)
    name = "btrfs"
    # a file's extent items follow its inode item in the subvolume's tree: the step's seeks read
    # that leaf whether the inode is in memory or not
    seeks_read_inode_cluster = True

    def __init__(self, mount, table=None):
        super().__init__(mount, table)
        self._devs: Optional[Dict[int, int]] = None      # devid -> dev_t
        self._chunks: Optional[List[Chunk]] = None
        self.unmapped_bytes = 0

    def _open(self) -> int:
        return os.open(self.mount.target, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)

    def device_ids(self) -> Dict[int, int]:
        """devid -> dev_t of its block devices ({} if the ioctls fail)."""
        if self._devs is None:
            self._devs = {}
            try:
                fd = self._open()
                try:
                    paths = device_list(fd)
                finally:
                    os.close(fd)
            except OSError:
                paths = {}
            for devid, path in sorted(paths.items()):
                try:
                    rdev = os.stat(path).st_rdev
                except OSError:
                    continue
                if is_block_device(rdev):
                    self._devs[devid] = rdev
        return self._devs

    def devices(self) -> List[int]:
        return list(self.device_ids().values()) or super().devices()

    @cached_property
    def _leaves(self) -> Optional[Tuple[str, bytes, int, int]]:
        """(data device node, fsid, nodesize, tree id of the subvolume mounted here): what reading
        its leaves back needs; None if not answered."""
        node = device_node(self.data_device()) if self.data_device() is not None else None
        if node is None:
            return None
        m = re.search(rb"(?:^|,)subvolid=(\d+)(?:,|$)", self.mount.options)
        try:
            fd = self._open()
            try:
                info = bytearray(1024)
                fcntl.ioctl(fd, BTRFS_IOC_FS_INFO, info, True)
            finally:
                os.close(fd)
        except OSError:
            return None
        fsid, nodesize = bytes(info[16:32]), struct.unpack_from("=I", info, 32)[0]
        return (node, fsid, nodesize, int(m.group(1)) if m else FS_TREE) if nodesize else None

    def inode_clusters(self, sector: int, nr_sectors: int) -> List[Tuple[int, int]]:
        """btrfs keys every item of an inode by its number, so each leaf of a subvolume's tree
        holds the inode items of a run of numbers, and a lookup of any of them reads that leaf.
        The leaves in those sectors of data_device() are read back from the device (their header
        and keys: what is there now; a block rewritten since is checked against this file
        system's fsid, as a leaf, of the subvolume mounted here) and each gives the numbers
        [first, last + 1) of its inode items. [] for other tree blocks, or a device that cannot
        be read."""
        if self._leaves is None or nr_sectors <= 0:
            return []
        node, fsid, nodesize, tree = self._leaves
        start, end = sector * 512, (sector + nr_sectors) * 512
        try:
            fd = os.open(node, os.O_RDONLY | os.O_CLOEXEC)
        except OSError:
            return []
        out = []
        try:
            for pos in range(start, end - nodesize + 1, nodesize):
                try:
                    blk = os.pread(fd, nodesize, pos)
                except OSError:
                    break
                if len(blk) < nodesize:
                    break
                _, bfsid, _, _, _, _, owner, nritems, level = _HEADER.unpack_from(blk)
                if bfsid != fsid or level != 0 or owner != tree or _HEADER.size + nritems * _ITEM.size > nodesize:
                    continue
                inos = [k for k, t, *_ in (_ITEM.unpack_from(blk, _HEADER.size + i * _ITEM.size)
                                           for i in range(nritems)) if t == INODE_ITEM_KEY]
                if inos:
                    out.append((min(inos), max(inos) + 1))
        finally:
            os.close(fd)
        return out

    def chunks(self) -> List[Chunk]:
        if self._chunks is None:
            fd = self._open()
            try:
                self._chunks = sorted(read_chunks(fd))
            finally:
                os.close(fd)
        return self._chunks

    def extents(self, fd: int) -> List[Extent]:
        logical = super().extents(fd)
        ids = self.device_ids()
        main = self.data_device()
        devid = next((i for i, d in ids.items() if d == main), 1)
        out, left_out = translate(self.chunks(), logical, devid)
        self.unmapped_bytes += left_out
        return out
