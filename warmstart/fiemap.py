"""FIEMAP (FS_IOC_FIEMAP) in Python: where a file's bytes are on its block device, now.

Only extents with a real physical address are returned as mappable; delayed-allocation, unknown,
encoded and inline extents have none (inline data lives in the inode: metadata) and are skipped.
"""

import fcntl
import os
import struct
from typing import List

from .model import Extent

FS_IOC_FIEMAP = 0xC020660B
FIEMAP_FLAG_SYNC = 0x1
FIEMAP_EXTENT_LAST = 0x1
FIEMAP_EXTENT_UNKNOWN = 0x2
FIEMAP_EXTENT_DELALLOC = 0x4
FIEMAP_EXTENT_ENCODED = 0x8
FIEMAP_EXTENT_DATA_INLINE = 0x200
FIEMAP_EXTENT_UNWRITTEN = 0x800
NOT_MAPPABLE = FIEMAP_EXTENT_UNKNOWN | FIEMAP_EXTENT_DELALLOC | FIEMAP_EXTENT_ENCODED | FIEMAP_EXTENT_DATA_INLINE

_HEAD = struct.Struct("=QQIIII")        # fm_start, fm_length, fm_flags, fm_mapped_extents, fm_extent_count, reserved
_EXT = struct.Struct("=QQQQQIIII")      # fe_logical, fe_physical, fe_length, 2x reserved64, fe_flags, 3x reserved
BATCH = 256


def fiemap_fd(fd: int, sync: bool = True) -> List[Extent]:
    """All extents of the open file fd, in logical order. Raises OSError (e.g. EOPNOTSUPP).
    sync flushes delayed allocation first, so freshly written data has real block numbers."""
    out: List[Extent] = []
    start = 0
    while True:
        buf = bytearray(_HEAD.size + BATCH * _EXT.size)
        _HEAD.pack_into(buf, 0, start, 0xFFFFFFFFFFFFFFFF - start, FIEMAP_FLAG_SYNC if sync else 0, 0, BATCH, 0)
        fcntl.ioctl(fd, FS_IOC_FIEMAP, buf, True)
        mapped = _HEAD.unpack_from(buf, 0)[3]
        last = False
        for i in range(mapped):
            logical, physical, length, _, _, flags, _, _, _ = _EXT.unpack_from(buf, _HEAD.size + i * _EXT.size)
            out.append(Extent(logical, physical, length, flags))
            last = bool(flags & FIEMAP_EXTENT_LAST)
        if mapped == 0 or last:
            return out
        start = out[-1].logical + out[-1].length


def fiemap(path: bytes) -> List[Extent]:
    """Extents of the file at path (bytes). Raises OSError."""
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC | getattr(os, "O_NOATIME", 0))
    try:
        return fiemap_fd(fd)
    finally:
        os.close(fd)


def mappable(e: Extent) -> bool:
    """Has a physical address whose blocks hold the file's bytes (unwritten extents read as zeros
    without I/O, so they are not worth fetching either)."""
    return not (e.flags & (NOT_MAPPABLE | FIEMAP_EXTENT_UNWRITTEN))
