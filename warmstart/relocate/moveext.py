"""ext4's online-defragmentation primitive, EXT4_IOC_MOVE_EXT, the only way warmstart moves data.

The kernel swaps the blocks of a range of the original file with blocks of a donor file, page by
page under the inode locks and in journal transactions; user space never holds the data. So a
crash or SIGKILL at any point leaves each file whole: every page is either still in its old
block or already in its new one. The same call e4defrag uses.
"""

import errno
import fcntl
import os
import struct

from ..errors import WarmstartError

# struct move_extent { __u32 reserved; __u32 donor_fd; __u64 orig_start; __u64 donor_start;
#                      __u64 len; __u64 moved_len; }  -- starts and lengths in file-system blocks
_MOVE_EXTENT = struct.Struct("=IIQQQQ")
# _IOWR('f', 15, struct move_extent)
EXT4_IOC_MOVE_EXT = (3 << 30) | (_MOVE_EXTENT.size << 16) | (ord("f") << 8) | 15

_WHY = {
    errno.EOPNOTSUPP: "the file system does not support moving extents (not ext4 with extents?)",
    errno.ENOTTY: "the file system does not support moving extents (not ext4)",
    errno.EBADF: "both files must be open for reading and writing",
    errno.EXDEV: "the donor is on another file system",
    errno.EBUSY: "the file is in use in a way that forbids moving (swap file, DAX, or mapped)",
    errno.ENODATA: "the donor range is not allocated",
    errno.EINVAL: "the kernel refused the ranges (unaligned, beyond the end, or an unsupported file)",
    errno.ETXTBSY: "the file is busy",
    errno.EPERM: "the file is immutable or append-only",
    errno.ENOSPC: "the file system ran out of space during the move",
}


def move_extent(orig_fd: int, donor_fd: int, orig_start: int, donor_start: int, nblocks: int,
                path: bytes = b"?") -> int:
    """Give blocks [orig_start, +nblocks) of orig_fd the physical blocks the donor has at
    [donor_start, +nblocks); the donor gets the old ones. Returns the number of blocks moved.

    Raises WarmstartError naming the file and the errno when the kernel refuses; a partial move
    (moved < nblocks) is reported to the caller, not hidden.
    """
    buf = bytearray(_MOVE_EXTENT.pack(0, donor_fd, orig_start, donor_start, nblocks, 0))
    try:
        fcntl.ioctl(orig_fd, EXT4_IOC_MOVE_EXT, buf)
    except OSError as e:
        why = _WHY.get(e.errno, e.strerror)
        raise MoveError(e.errno, f"cannot move blocks of {os.fsdecode(path)}: {why} "
                                 f"[{errno.errorcode.get(e.errno, e.errno)}]")
    return _MOVE_EXTENT.unpack(buf)[5]


class MoveError(WarmstartError):
    """The kernel refused a move; .errno says why. The file is unchanged beyond moved blocks."""

    def __init__(self, err: int, message: str):
        super().__init__(message)
        self.errno = err
