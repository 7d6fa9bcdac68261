"""FIEMAP: where a file's bytes are on the device, to check the donor and the result of a move.

Kept local to relocation (the analyzer has its own reader for schedules); only what relocation
needs: logical, physical and length in bytes, plus the flags that make a file unmovable.
"""

import fcntl
import struct
from dataclasses import dataclass
from typing import List

FS_IOC_FIEMAP = (3 << 30) | (32 << 16) | (ord("f") << 8) | 11   # _IOWR('f', 11, struct fiemap)
FIEMAP_FLAG_SYNC = 0x1
FIEMAP_EXTENT_LAST = 0x1
FIEMAP_EXTENT_UNKNOWN = 0x2
FIEMAP_EXTENT_DELALLOC = 0x4
FIEMAP_EXTENT_DATA_INLINE = 0x200
FIEMAP_EXTENT_UNWRITTEN = 0x800

_HEAD = struct.Struct("=QQIIII")
_EXT = struct.Struct("=QQQQQIIII")
_BATCH = 256


@dataclass(frozen=True)
class PhysExtent:
    logical: int
    physical: int
    length: int
    flags: int

    @property
    def physical_end(self) -> int:
        return self.physical + self.length


def fiemap(fd: int, sync: bool = True) -> List[PhysExtent]:
    """All extents of the open file fd, in logical order (sync=True flushes delayed allocation
    first, so fresh data has real block numbers)."""
    out: List[PhysExtent] = []
    start = 0
    while True:
        buf = bytearray(_HEAD.pack(start, (1 << 64) - 1 - start, FIEMAP_FLAG_SYNC if sync else 0,
                                   0, _BATCH, 0) + bytes(_EXT.size * _BATCH))
        fcntl.ioctl(fd, FS_IOC_FIEMAP, buf)
        mapped = _HEAD.unpack_from(buf)[3]
        if mapped == 0:
            return out
        for i in range(mapped):
            logical, physical, length, _, _, flags, _, _, _ = _EXT.unpack_from(buf, _HEAD.size + i * _EXT.size)
            out.append(PhysExtent(logical, physical, length, flags))
        last = out[-1]
        if last.flags & FIEMAP_EXTENT_LAST:
            return out
        start = last.logical + last.length


def discontinuities(extents: List[PhysExtent]) -> int:
    """How many times the next logical extent does not start where the previous one ended on disk
    (ext4 splits long runs into several extents; only the jumps cost a seek)."""
    return sum(1 for a, b in zip(extents, extents[1:]) if b.physical != a.physical_end)
