"""Why a file may not be relocated: the refusals the issue names, each with its reason and fix.

Checked per file before anything moves: same file system as the region, unchanged since the
schedule was made, not immutable / append-only / inline / verity / data-journalled / non-extent,
not sparse, not open for writing by anyone. The last one is checked twice: a /proc scan names the
writer, and a read lease taken just before the move closes most of the race (the kernel grants a
read lease only while nobody has the file open for writing).
"""

import errno
import fcntl
import os
import stat
import struct
from typing import Dict, Iterable, List, Optional, Set, Tuple

from ..errors import WarmstartError
from ..fiemap import FIEMAP_EXTENT_DATA_INLINE, fiemap_fd
from ..mountinfo import mounts

FS_IOC_GETFLAGS = (2 << 30) | (8 << 16) | (ord("f") << 8) | 1   # _IOR('f', 1, long)
_FLAG_REFUSALS = [
    (0x00000010, "immutable (chattr +i): remove the flag with `chattr -i` to relocate it"),
    (0x00000020, "append-only (chattr +a): remove the flag with `chattr -a` to relocate it"),
    (0x10000000, "stored inline in its inode: there are no blocks to move"),
    (0x00100000, "protected by fs-verity: ext4 cannot move its blocks"),
    (0x00000800, "encrypted: ext4 cannot move its blocks"),
    (0x00004000, "journalled data (chattr +j): ext4 cannot move its blocks; `chattr -j` first"),
    (0x02000000, "a DAX file: ext4 cannot move its blocks"),
]
EXT4_EXTENTS_FL = 0x00080000


def mount_of(dev: int) -> Tuple[str, bytes]:
    """(file-system type, mount point) of the file system with st_dev `dev`, from mountinfo."""
    best = None
    for m in mounts():
        # Prefer a mount of the file system's root (a bind mount of a subdirectory also works).
        if m.dev == dev and (best is None or m.root == b"/"):
            best = (m.fstype, m.target)
    if best is None:
        raise WarmstartError(f"no mounted file system has device {os.major(dev)}:{os.minor(dev)}: "
                             f"is it still mounted?")
    return best


def writers(identities: Iterable[Tuple[int, int]]) -> Dict[Tuple[int, int], List[str]]:
    """For each (dev, ino) open for writing by some process: ["pid (comm)", ...]. One /proc scan."""
    want: Set[Tuple[int, int]] = set(identities)
    found: Dict[Tuple[int, int], List[str]] = {}
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            fds = os.listdir(f"/proc/{pid}/fd")
        except OSError:
            continue   # gone, or a kernel thread
        for fd in fds:
            try:
                st = os.stat(f"/proc/{pid}/fd/{fd}")
                if (st.st_dev, st.st_ino) not in want:
                    continue
                with open(f"/proc/{pid}/fdinfo/{fd}") as f:
                    flags = next(int(l.split()[1], 8) for l in f if l.startswith("flags:"))
            except (OSError, StopIteration, ValueError):
                continue
            if flags & os.O_ACCMODE in (os.O_WRONLY, os.O_RDWR):
                found.setdefault((st.st_dev, st.st_ino), []).append(f"{pid} ({_comm(pid)})")
    return found


def _comm(pid: str) -> str:
    try:
        with open(f"/proc/{pid}/comm") as f:
            return f.read().strip()
    except OSError:
        return "?"


def file_flags(fd: int) -> int:
    buf = bytearray(8)
    fcntl.ioctl(fd, FS_IOC_GETFLAGS, buf)
    return struct.unpack_from("=I", buf)[0]


def refusal(path: bytes, target_dev: int, expect: Optional[Tuple[int, int, int]] = None,
            writer_map: Optional[Dict[Tuple[int, int], List[str]]] = None) -> Optional[str]:
    """Why `path` must not be moved, or None if it may. `expect` = (ino, size, mtime_ns) recorded
    in the schedule; a different file now at that path is refused (the schedule is stale)."""
    try:
        st = os.stat(path)
    except OSError as e:
        return f"cannot stat it ({e.strerror}): re-record the app if it was removed"
    if not stat.S_ISREG(st.st_mode):
        return "not a regular file"
    if st.st_dev != target_dev:
        return (f"on another file system (device {os.major(st.st_dev)}:{os.minor(st.st_dev)}) than the "
                f"relocation region ({os.major(target_dev)}:{os.minor(target_dev)}); it stays where it is")
    if expect is not None and (st.st_ino, st.st_size, st.st_mtime_ns) != expect:
        return "changed since the schedule was made: run `warmstart analyze` for the app first"
    if writer_map and (st.st_dev, st.st_ino) in writer_map:
        return "open for writing by " + ", ".join(writer_map[(st.st_dev, st.st_ino)]) + ": close it and retry"
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError as e:
        return f"cannot open it ({e.strerror})"
    try:
        flags = file_flags(fd)
        for bit, why in _FLAG_REFUSALS:
            if flags & bit:
                return why
        if not flags & EXT4_EXTENTS_FL:
            return "uses ext3-style block maps, not extents: `chattr +e` it (or e4defrag) first"
        extents = fiemap_fd(fd)
        if any(e.flags & FIEMAP_EXTENT_DATA_INLINE for e in extents):
            return "stored inline in its inode: there are no blocks to move"
        covered = sum(e.length for e in extents if e.logical < st.st_size)
        block = os.statvfs(path).f_bsize
        if covered < -(-st.st_size // block) * block:
            return "sparse (has holes): moving it would allocate the holes; left where it is"
    except OSError as e:
        return f"cannot read its flags or extents ({e.strerror})"
    finally:
        os.close(fd)
    return None


def lease_free_of_writers(fd: int) -> bool:
    """True if nobody has the file open for writing right now (a read lease is granted only then).
    The lease is released at once: holding it would make our own O_RDWR open break it."""
    try:
        fcntl.fcntl(fd, fcntl.F_SETLEASE, fcntl.F_RDLCK)
    except OSError as e:
        if e.errno in (errno.EAGAIN, errno.EBUSY):
            return False
        if e.errno in (errno.EINVAL, errno.ENOLCK):   # leases disabled (fs.leases-enable=0)
            return True
        raise
    fcntl.fcntl(fd, fcntl.F_SETLEASE, fcntl.F_UNLCK)
    return True
