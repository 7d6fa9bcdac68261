"""The metadata blocks the kernel reads to open a file on ext4, found from the local file system.

An exported schedule cannot carry metadata by LBA (inode numbers and block placement differ per
machine), so import re-derives, for each imported file: the inode-table block holding its inode,
its extent-tree index/leaf blocks (files with more than 4 extents), and for every directory on
its path up to the file system's root the same plus the directory's blocks (FIEMAP). These are
the reads a cold open() and read() make before data (the kernel flags them REQ_META), i.e. what
the analyzer's metadata sweep holds for a locally recorded launch.

Read straight from the block device: the superblock, the group descriptor and the inode (the
same pages the mounted ext4 uses, so they are current after a sync). Anything but plain ext4
(other file systems, meta_bg, no read access to the device) gives no blocks and a reason.
"""

import os
import struct
from typing import Dict, List, Optional, Set, Tuple

from .fiemap import fiemap_fd, mappable
from .filemap import disk_of
from ..errors import WarmstartError
from ..replay.export import block_device_node

EXT4_MAGIC = 0xEF53
INCOMPAT_META_BG = 0x10
INCOMPAT_64BIT = 0x80
EXTENTS_FL = 0x80000
EXTENT_MAGIC = 0xF30A
MAX_DIR_BLOCKS = 64          # a larger directory: only its first block (htree root)
MAX_TREE_BLOCKS = 256


class Ext4:
    """One mounted ext4 file system, read through its block device."""

    def __init__(self, st_dev: int):
        node = block_device_node(st_dev)
        self.fd = os.open(node, os.O_RDONLY | os.O_CLOEXEC)
        try:
            sb = os.pread(self.fd, 1024, 1024)
            if len(sb) < 1024 or struct.unpack_from("<H", sb, 0x38)[0] != EXT4_MAGIC:
                raise WarmstartError(f"{os.fsdecode(node)} holds no ext2/3/4 superblock")
            self.first_data_block, log_bs = struct.unpack_from("<II", sb, 0x14)
            self.bs = 1024 << log_bs
            self.ipg = struct.unpack_from("<I", sb, 0x28)[0]
            self.inode_size = struct.unpack_from("<H", sb, 0x58)[0]
            incompat = struct.unpack_from("<I", sb, 0x60)[0]
            if incompat & INCOMPAT_META_BG:
                raise WarmstartError(f"{os.fsdecode(node)}: meta_bg group descriptors are not supported")
            self.desc_size = struct.unpack_from("<H", sb, 0xFE)[0] if incompat & INCOMPAT_64BIT else 32
            self.desc_size = self.desc_size or 32
        except BaseException:
            os.close(self.fd)
            raise
        self.disk, self.part_start = disk_of(st_dev)
        self._tables: Dict[int, int] = {}

    def close(self):
        os.close(self.fd)

    def inode_location(self, ino: int) -> Tuple[int, bytes]:
        """(block number holding inode ino, the inode's bytes)."""
        group, index = divmod(ino - 1, self.ipg)
        if group not in self._tables:
            gdt = (self.first_data_block + 1) * self.bs + group * self.desc_size
            d = os.pread(self.fd, self.desc_size, gdt)
            table = struct.unpack_from("<I", d, 8)[0]
            if self.desc_size >= 64:
                table |= struct.unpack_from("<I", d, 0x28)[0] << 32
            self._tables[group] = table
        off = self._tables[group] * self.bs + index * self.inode_size
        return off // self.bs, os.pread(self.fd, self.inode_size, off)

    def tree_blocks(self, inode: bytes) -> List[int]:
        """Index and leaf blocks of an extent-mapped inode's tree (none for <= 4 extents)."""
        if len(inode) < 0x64 or not struct.unpack_from("<I", inode, 0x20)[0] & EXTENTS_FL:
            return []
        out: List[int] = []
        todo = [inode[0x28:0x64]]
        while todo and len(out) < MAX_TREE_BLOCKS:
            node = todo.pop()
            magic, entries, _, depth = struct.unpack_from("<HHHH", node, 0)
            if magic != EXTENT_MAGIC or depth == 0:
                continue
            for k in range(min(entries, (len(node) - 12) // 12)):
                lo, hi = struct.unpack_from("<IH", node, 12 + 12 * k + 4)
                blk = lo | hi << 32
                out.append(blk)
                if depth > 1:
                    todo.append(os.pread(self.fd, self.bs, blk * self.bs))
        return out

    def sectors(self, block: int) -> Tuple[int, int]:
        """(sector on the whole disk, sectors) of a file-system block."""
        return self.part_start + block * self.bs // 512, self.bs // 512


class MetadataFinder:
    """Blocks to fetch before a file's data, per file; each block given once across calls."""

    def __init__(self):
        self._fs: Dict[int, object] = {}     # st_dev -> Ext4 or the reason it is unusable
        self._seen: Set[Tuple[int, int]] = set()
        self._done: Set[Tuple[int, int]] = set()     # (st_dev, ino) of files already given
        self.reasons: Dict[str, str] = {}    # device -> why no metadata was derived

    def close(self):
        for fs in self._fs.values():
            if isinstance(fs, Ext4):
                fs.close()

    def _get(self, st_dev: int) -> Optional[Ext4]:
        if st_dev not in self._fs:
            try:
                self._fs[st_dev] = Ext4(st_dev)
            except WarmstartError as e:
                self._fs[st_dev] = str(e)
            except OSError as e:
                self._fs[st_dev] = f"cannot read {os.fsdecode(e.filename or b'the device')}: {e.strerror}"
            if isinstance(self._fs[st_dev], str):
                self.reasons[f"{os.major(st_dev)}:{os.minor(st_dev)}"] = self._fs[st_dev]
        fs = self._fs[st_dev]
        return fs if isinstance(fs, Ext4) else None

    def _inode_blocks(self, fs: Ext4, path: bytes, st: os.stat_result, is_dir: bool) -> List[int]:
        blk, inode = fs.inode_location(st.st_ino)
        blocks = [blk] + fs.tree_blocks(inode)
        if is_dir:
            try:
                fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
                try:
                    exts = [e for e in fiemap_fd(fd) if mappable(e)]
                finally:
                    os.close(fd)
            except OSError:
                exts = []
            dblocks = [(e.physical + k) // fs.bs for e in exts for k in range(0, e.length, fs.bs)]
            blocks += dblocks if len(dblocks) <= MAX_DIR_BLOCKS else dblocks[:1]
        return blocks

    def for_file(self, path: bytes, st: os.stat_result) -> List[Tuple[int, int, int]]:
        """(disk dev, sector, nr_sectors) of the not yet given metadata blocks of path."""
        fs = self._get(st.st_dev)
        if fs is None or (st.st_dev, st.st_ino) in self._done:
            return []
        self._done.add((st.st_dev, st.st_ino))
        blocks = []
        try:
            blocks += self._inode_blocks(fs, path, st, False)
            d = os.path.dirname(os.path.abspath(path))
            while True:
                dst = os.stat(d)
                if dst.st_dev != st.st_dev:
                    break
                blocks += self._inode_blocks(fs, d, dst, True)
                if d == b"/":
                    break
                d = os.path.dirname(d)
        except OSError:
            pass     # what was found so far still helps
        out = []
        for b in blocks:
            if (fs.disk, b) in self._seen:
                continue
            self._seen.add((fs.disk, b))
            out.append((fs.disk, *fs.sectors(b)))
        return out
