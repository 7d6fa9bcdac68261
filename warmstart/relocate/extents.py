"""FIEMAP: where a file's bytes are on the device, to check the donor and the result of a move.

The ioctl is warmstart/fiemap.py; this adds what relocation asks of the result.
"""

from dataclasses import dataclass
from typing import List

from ..fiemap import fiemap_fd


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
    first, so fresh data has real block numbers). The ioctl is the analyzer's."""
    return [PhysExtent(e.logical, e.physical, e.length, e.flags) for e in fiemap_fd(fd, sync)]


def discontinuities(extents: List[PhysExtent]) -> int:
    """How many times the next logical extent does not start where the previous one ended on disk
    (ext4 splits long runs into several extents; only the jumps cost a seek)."""
    return sum(1 for a, b in zip(extents, extents[1:]) if b.physical != a.physical_end)
