"""FIEMAP (FS_IOC_FIEMAP) in Python: where a file's bytes are on its block device, now, and the
one placement of file bytes on sectors (place, Placement) that the analyzer, import and
relocation use.

Only extents with a real physical address are returned as mappable; delayed-allocation, unknown,
encoded and inline extents have none (inline data lives in the inode: metadata) and are skipped.
"""

import fcntl
import os
import struct
from typing import TYPE_CHECKING, Dict, Iterable, List, NamedTuple, Optional, Tuple

from .devices import disk_of
from .model import Extent

if TYPE_CHECKING:
    from .model import Range

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


def mapped_extents_fd(fd: int) -> List[Extent]:
    """The extents of the open file fd whose blocks hold its bytes (see mappable)."""
    return [e for e in fiemap_fd(fd) if mappable(e)]


def mapped_extents(path: bytes) -> List[Extent]:
    """The extents of the file at path whose blocks hold its bytes (see mappable). Raises OSError."""
    return [e for e in fiemap(path) if mappable(e)]


# -- placement: file bytes -> sectors -------------------------------------------------------

class Run(NamedTuple):
    """File bytes [file_offset, +length) stored at sectors [sector, +nr_sectors)."""
    sector: int
    nr_sectors: int
    file_offset: int
    length: int


def place(extents: Iterable[Extent], offset: int, length: int, base: int = 0) -> List[Run]:
    """Where the file bytes [offset, +length) are, as sector runs in file order, `base` added to
    every sector (a partition's start gives whole-disk sectors). A run ends where the bytes stop
    being contiguous on the device; touching extents are joined while the run so far fills whole
    sectors. Bytes in no extent given (holes, unwritten or unmapped extents) are in no run."""
    out: List[Run] = []
    lo, hi = offset, offset + length
    for e in extents:
        a, b = max(lo, e.logical), min(hi, e.logical + e.length)
        if a >= b:
            continue
        phys = e.physical + (a - e.logical)
        sector, end = base + phys // 512, base + -(-(phys + b - a) // 512)
        prev = out[-1] if out else None
        if prev and prev.sector + prev.nr_sectors == sector and prev.file_offset + prev.length == a \
                and prev.length == prev.nr_sectors * 512:
            out[-1] = Run(prev.sector, end - prev.sector, prev.file_offset, prev.length + b - a)
        else:
            out.append(Run(sector, end - sector, a, b - a))
    return out


def sector_base(file_dev: int, dev: int) -> int:
    """What to add to a file's FIEMAP sectors (relative to its file system's device file_dev) to
    address them on block device dev: 0 on that device, the partition's start on its whole disk."""
    return 0 if dev == file_dev else disk_of(file_dev)[1]


class Placement:
    """Files' mapped extents as they are now, read once per path; locate() places a Range."""

    def __init__(self):
        self._cache: Dict[bytes, Tuple[Optional[os.stat_result], List[Extent]]] = {}

    def get(self, path: bytes) -> Tuple[Optional[os.stat_result], List[Extent]]:
        """(stat, mapped extents) of the file at path now; (None, []) if it cannot be opened or mapped."""
        if path not in self._cache:
            try:
                fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
            except OSError:
                self._cache[path] = (None, [])
            else:
                try:
                    self._cache[path] = (os.fstat(fd), mapped_extents_fd(fd))
                except OSError:
                    self._cache[path] = (None, [])
                finally:
                    os.close(fd)
        return self._cache[path]

    def locate(self, r: "Range") -> Optional[List[Run]]:
        """The runs on r.dev holding file range r now; None when that is unknown (a device range,
        a file that is gone or replaced, or bytes no extent maps)."""
        if r.file is None or r.file_offset is None:
            return None
        st, extents = self.get(r.file.path)
        if st is None or st.st_ino != r.file.ino:
            return None
        return place(extents, r.file_offset, r.length, sector_base(st.st_dev, r.dev)) or None
