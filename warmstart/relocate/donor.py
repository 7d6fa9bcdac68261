"""The donor: one unlinked file whose freshly allocated blocks become the relocation region.

fallocate asks ext4 for the whole region at once, so mballoc hands out the longest free runs it
has; FIEMAP then tells whether they really form one run. If not, the fragmented donor is kept
open (its blocks stay taken) and another is tried, so the allocator must look elsewhere; the
best one wins and the others are freed. The donor is created with O_TMPFILE (or unlinked at
once), so if the relocator dies at any point the kernel frees what is left of it: nothing to
clean up, no file name left behind.
"""

import ctypes
import errno
import os
from typing import List, Optional

from ..errors import WarmstartError
from ..fiemap import fiemap_fd
from ..model import Extent

_libc = ctypes.CDLL(None, use_errno=True)
_libc.fallocate.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_int64, ctypes.c_int64]

# A region is "contiguous" if it spans no more than this much beyond its size (ext4 leaves
# superblock backups and group metadata inside long runs; skipping them costs a short seek).
SLACK_FRACTION = 0.02
SLACK_BYTES = 4 << 20


class Donor:
    def __init__(self, fd: int, nbytes: int, extents: List[Extent]):
        self.fd = fd
        self.nbytes = nbytes
        self.extents = extents

    @property
    def start(self) -> int:
        return min(e.physical for e in self.extents)

    @property
    def span(self) -> int:
        return max(e.physical_end for e in self.extents) - self.start

    @property
    def discontinuities(self) -> int:
        return discontinuities(self.extents)

    def contiguous(self) -> bool:
        ascending = all(b.physical >= a.physical_end for a, b in zip(self.extents, self.extents[1:]))
        return ascending and self.span <= self.nbytes * (1 + SLACK_FRACTION) + SLACK_BYTES

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1

    def describe(self) -> dict:
        return {"start_sector": self.start // 512, "bytes": self.nbytes, "span_bytes": self.span,
                "extents": len(self.extents), "discontinuities": self.discontinuities}


def discontinuities(extents: List[Extent]) -> int:
    """How many times the next logical extent does not start where the previous one ended on disk
    (ext4 splits long runs into several extents; only the jumps cost a seek)."""
    return sum(1 for a, b in zip(extents, extents[1:]) if b.physical != a.physical_end)


def _open_unlinked(directory: bytes) -> int:
    try:
        return os.open(directory, os.O_TMPFILE | os.O_RDWR | os.O_CLOEXEC, 0o600)
    except OSError as e:
        if e.errno not in (errno.EOPNOTSUPP, errno.EISDIR, errno.EINVAL):
            raise
    name = os.path.join(directory, b".warmstart-donor.%d" % os.getpid())
    fd = os.open(name, os.O_CREAT | os.O_EXCL | os.O_RDWR | os.O_CLOEXEC, 0o600)
    os.unlink(name)
    return fd


def _allocate_one(directory: bytes, nbytes: int) -> Donor:
    fd = _open_unlinked(directory)
    try:
        if _libc.fallocate(fd, 0, 0, nbytes) != 0:
            err = ctypes.get_errno()
            raise OSError(err, os.strerror(err))
        return Donor(fd, nbytes, fiemap_fd(fd))
    except BaseException:
        os.close(fd)
        raise


def allocate(directory: bytes, nbytes: int, free_bytes: int, tries: int = 3) -> Donor:
    """A donor of nbytes in `directory`'s file system, as contiguous as the allocator manages in
    `tries` attempts (later attempts only while the free space allows holding the earlier ones)."""
    held: List[Donor] = []
    best: Optional[Donor] = None
    ok = False
    try:
        for attempt in range(tries):
            if attempt and free_bytes < (attempt + 1) * nbytes + SLACK_BYTES:
                break
            try:
                d = _allocate_one(directory, nbytes)
            except OSError as e:
                if attempt == 0:
                    raise WarmstartError(f"cannot allocate a {nbytes >> 20} MiB relocation region in "
                                         f"{os.fsdecode(directory)}: {e.strerror}; free some space")
                break
            held.append(d)
            if best is None or (d.discontinuities, d.span) < (best.discontinuities, best.span):
                best = d
            if d.contiguous():
                break
        ok = True
    finally:
        for d in held:
            if not ok or d is not best:
                d.close()
    assert best is not None
    return best
