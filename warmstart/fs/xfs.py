"""XFS: FIEMAP answers byte offsets on the data device (xfs_bmapi daddr -> bytes), st_dev is the
data device. Files on a realtime device (XFS_XFLAG_REALTIME) are not handled: their FIEMAP
addresses the rt device, which this does not look up. metadata: warmed through the file system (FileSystem.metadata "fs"; fs/metadata.py)."""

import fcntl
import os
import re
import struct
from functools import cached_property
from typing import Dict, List, Optional, Tuple

from .generic import FileSystem

XFS_IOC_FSGEOMETRY_V1 = 0x80705864        # _IOR('X', 100, struct xfs_fsop_geom_v1), no privilege
_GEOM = struct.Struct("=8I")              # blocksize, rtextsize, agblocks, agcount, logblocks,
                                          # sectsize, inodesize, imaxpct (then fields not used)
# xfs_lookup's text: "dev %d:%d dp ino 0x%llx name %.*s" (the name's bytes as they are)
_LOOKUP = re.compile(rb"^dev (\d+):(\d+) dp ino 0x([0-9a-f]+) name (.*)$")


class Xfs(FileSystem):
    fstypes = ("xfs",)
    name = "xfs"
    # a directory's blocks are extents of its own, read ahead in order by getdents: reading the
    # scheduled paths' directories whole cost less than their lookups alone (python's 53
    # directories and 184 files on the emulated hdd7200: 320 ms, lookups only 421 ms)
    list_dirs = True
    # a directory's blocks lie near its inode, in the allocation group the rotor gave it, and
    # its lookups wait for them: visiting an entry before its directory made the step jump
    # between allocation groups for each path's ancestors (docs/replayer.md, "Sweeps")
    step_sweeps = True
    # every lookup that misses the dentry cache, names that exist or not (xfs_vn_lookup)
    lookup_event = "xfs/xfs_lookup"

    @staticmethod
    def parse_lookup(body: bytes) -> Optional[Tuple[int, int, bytes]]:
        m = _LOOKUP.match(body)
        if m is None or not m.group(4) or b"/" in m.group(4):
            return None
        return os.makedev(int(m.group(1)), int(m.group(2))), int(m.group(3), 16), m.group(4)

    @cached_property
    def _geometry(self) -> Optional[Tuple[int, int, int, int, int]]:
        """(block size, blocks per allocation group, inode size, log2 inodes per block, log2
        blocks per allocation group's numbering), or None if not answered."""
        try:
            fd = os.open(self.mount.target, os.O_RDONLY | os.O_DIRECTORY)
        except OSError:
            return None
        try:
            buf = bytearray(112)
            fcntl.ioctl(fd, XFS_IOC_FSGEOMETRY_V1, buf, True)
        except OSError:
            return None
        finally:
            os.close(fd)
        bsize, _, agblocks, _, _, _, isize, _ = _GEOM.unpack_from(buf)
        if not (bsize and agblocks and isize):
            return None
        return bsize, agblocks, isize, (bsize // isize).bit_length() - 1, (agblocks - 1).bit_length()

    def metadata_positions(self, entries: List[Tuple[bytes, os.stat_result]]) -> Dict[Tuple[int, int], int]:
        """An XFS inode number is its place (inode_clusters): the byte offset of its slot on the
        data device, from the number and the geometry alone (nothing read). That is inode order
        too; with places, the step visits the files it only looks up in the same one pass as the
        rest (fsmeta.c), not in a group of their own first."""
        geom = self._geometry
        if geom is None:
            return {}
        bsize, agblocks, isize, inopblog, agblklog = geom
        out = {}
        for _, st in entries:
            ino = st.st_ino
            agno, agbno = ino >> (agblklog + inopblog), (ino >> inopblog) & ((1 << agblklog) - 1)
            out[(st.st_dev, ino)] = (agno * agblocks + agbno) * bsize + (ino & ((1 << inopblog) - 1)) * isize
        return out

    def inode_clusters(self, sector: int, nr_sectors: int) -> List[Tuple[int, int]]:
        """An XFS inode number is its place: allocation group, block in it, slot in the block
        (agno << (agblklog + inopblog) | agbno << inopblog | slot). Inodes are read in clusters
        of 8 KiB x inode size / 256 (v5: 16 KiB of 512-byte inodes; xfs_inode_cluster_size),
        aligned. A read of other metadata gives numbers no file has."""
        geom = self._geometry
        if geom is None or nr_sectors <= 0:
            return []
        bsize, agblocks, isize, inopblog, agblklog = geom
        cluster = max(1, 8192 * max(1, isize // 256) // bsize)        # blocks per cluster
        per = bsize // 512
        out = []
        blk, end = sector // per, -(-(sector + nr_sectors) // per)
        while blk < end:
            agno, agbno = divmod(blk, agblocks)
            agbno -= agbno % cluster
            first = (agno << (agblklog + inopblog)) | (agbno << inopblog)
            out.append((first, first + (cluster << inopblog)))
            blk = agno * agblocks + agbno + cluster
        return out
