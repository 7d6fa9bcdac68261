"""The metadata blocks the kernel reads to open a file on ext4, found from the local file system.

An exported schedule cannot carry metadata by LBA (inode numbers and block placement differ per
machine), so import re-derives, for each imported file: the inode-table block holding its inode,
its extent-tree index/leaf blocks (files with more than 4 extents), and for every directory on
its path up to the file system's root the same plus the directory's blocks (FIEMAP). These are
the reads a cold open() and read() make before data (the kernel flags them REQ_META), i.e. what
the analyzer's metadata sweep holds for a locally recorded launch.

For an inode block, the whole window ext4's inode-table readahead reads with it (up to
inode_readahead_blks blocks, aligned, within the group's used part of the table) is given: a cold
open() reads that window, and the inodes of files the launch only stats (Python stats each .py
whose .pyc it reads) are in it; fetching the inode block alone left those to synchronous reads
after the release (12 seeks, 0.035 s of the python launch on the emulated hdd7200).

Read straight from the block device: the superblock, the group descriptor and the inode (the
same pages the mounted ext4 uses, so they are current after a sync). Anything but plain ext4
(other file systems, meta_bg, no read access to the device) gives no blocks and a reason.
"""

import os
import struct
from typing import Dict, List, Optional, Set, Tuple

from ..fiemap import mapped_extents_fd
from ..devices import block_name, device_node, disk_of
from ..errors import WarmstartError

EXT4_MAGIC = 0xEF53
INCOMPAT_META_BG = 0x10
INCOMPAT_64BIT = 0x80
EXTENTS_FL = 0x80000
EXTENT_MAGIC = 0xF30A
MAX_DIR_BLOCKS = 64          # a larger directory: only its first block (htree root)
MAX_TREE_BLOCKS = 256
DEFAULT_INODE_READAHEAD_BLKS = 32    # ext4's default; the mounted value is in /sys/fs/ext4/DEV/
RO_COMPAT_GDT_CSUM = 0x10
RO_COMPAT_METADATA_CSUM = 0x400


class Ext4:
    """One mounted ext4 file system, read through its block device."""

    def __init__(self, st_dev: int):
        node = device_node(st_dev)
        if node is None:
            raise WarmstartError(f"block device {os.major(st_dev)}:{os.minor(st_dev)} is not present")
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
            ro_compat = struct.unpack_from("<I", sb, 0x64)[0]
            self.group_csum = bool(ro_compat & (RO_COMPAT_GDT_CSUM | RO_COMPAT_METADATA_CSUM))
        except BaseException:
            os.close(self.fd)
            raise
        self.disk, self.part_start = disk_of(st_dev)
        self._tables: Dict[int, Tuple[int, int]] = {}    # group -> (inode table block, blocks in use)
        self.ra_blks = _inode_readahead_blks(st_dev)

    def close(self):
        os.close(self.fd)

    def inode_location(self, ino: int) -> Tuple[int, bytes]:
        """(block number holding inode ino, the inode's bytes)."""
        group, index = divmod(ino - 1, self.ipg)
        off = self._table(group)[0] * self.bs + index * self.inode_size
        return off // self.bs, os.pread(self.fd, self.inode_size, off)

    def _table(self, group: int) -> Tuple[int, int]:
        if group not in self._tables:
            gdt = (self.first_data_block + 1) * self.bs + group * self.desc_size
            d = os.pread(self.fd, self.desc_size, gdt)
            table = struct.unpack_from("<I", d, 8)[0]
            unused = struct.unpack_from("<H", d, 0x1C)[0] if self.group_csum else 0
            if self.desc_size >= 64:
                table |= struct.unpack_from("<I", d, 0x28)[0] << 32
                unused |= (struct.unpack_from("<H", d, 0x32)[0] << 16) if self.group_csum else 0
            per_block = self.bs // self.inode_size
            self._tables[group] = (table, (self.ipg - unused) // per_block)
        return self._tables[group]

    def inode_readahead(self, ino: int, blk: int) -> List[int]:
        """The inode-table blocks ext4 reads with ino's block blk (__ext4_get_inode_loc): the
        aligned window of ra_blks blocks, clipped to the group's table and its used part."""
        if self.ra_blks <= 1:
            return [blk]
        table, used = self._table((ino - 1) // self.ipg)
        b = max(table, blk & ~(self.ra_blks - 1))
        end = min(b + self.ra_blks, table + used)
        return list(range(b, max(end, blk) + 1))

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


def _inode_readahead_blks(st_dev: int) -> int:
    """The mounted file system's inode_readahead_blks (a power of two), else ext4's default."""
    try:
        with open(f"/sys/fs/ext4/{block_name(st_dev)}/inode_readahead_blks") as f:
            return max(1, int(f.read()))
    except (OSError, ValueError):
        return DEFAULT_INODE_READAHEAD_BLKS


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
        blocks = fs.inode_readahead(st.st_ino, blk) + fs.tree_blocks(inode)
        if is_dir:
            try:
                fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
                try:
                    exts = mapped_extents_fd(fd)
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
