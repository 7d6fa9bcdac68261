"""inode -> path at record time: walk the file system of each device until all inodes are found.

The kernel's page-cache tracepoint gives (s_dev, ino) only. We find the mount of s_dev in
/proc/self/mountinfo and walk it with scandir (d_ino needs no stat), never crossing into other
mounts, stopping as soon as every wanted inode is found. Names are bytes throughout, so names
that are not UTF-8 round-trip. Deleted or unreachable inodes stay unresolved (path None).
Runs after tracing has stopped: its own reads are not part of any recording.
"""

import os
import stat
from typing import Dict, Iterable, List, Set, Tuple

from ..model import FileInfo
from ..fiemap import mapped_extents
from ..mountinfo import mounts


def mounts_of(dev: int) -> List[bytes]:
    """Mount points of the file system on dev; mounts of its root directory first."""
    on_dev = [m for m in mounts() if m.dev == dev]
    return [m.target for m in on_dev if m.root == b"/"] + [m.target for m in on_dev if m.root != b"/"]


def resolve_inodes(wanted: Iterable[Tuple[int, int]], max_entries: int = 2_000_000) -> List[FileInfo]:
    """FileInfo for every (dev, ino); path None where it could not be found."""
    by_dev: Dict[int, Set[int]] = {}
    for dev, ino in wanted:
        by_dev.setdefault(dev, set()).add(ino)
    found: Dict[Tuple[int, int], FileInfo] = {}
    for dev, inos in by_dev.items():
        for mnt in mounts_of(dev):
            _walk(mnt, dev, inos - {k[1] for k in found if k[0] == dev}, found, max_entries)
            if all((dev, i) in found for i in inos):
                break
    out = []
    for dev, inos in by_dev.items():
        for ino in sorted(inos):
            out.append(found.get((dev, ino)) or FileInfo(dev=dev, ino=ino, path=None))
    return out


def _walk(top: bytes, dev: int, wanted: Set[int], found: Dict, budget: int) -> None:
    if not wanted:
        return
    remaining = set(wanted)
    try:
        if os.lstat(top).st_ino in remaining:
            _found(top, dev, remaining, found)
    except OSError:
        return
    stack = [top]
    seen = 0
    while stack and remaining and seen < budget:
        d = stack.pop()
        try:
            it = os.scandir(d)
        except OSError:
            continue
        with it:
            for entry in it:
                seen += 1
                try:
                    if entry.inode() in remaining:
                        _found(entry.path, dev, remaining, found)
                    if entry.is_dir(follow_symlinks=False):
                        # a directory on another device is a mount point: do not cross
                        if entry.stat(follow_symlinks=False).st_dev == dev:
                            stack.append(entry.path)
                except OSError:
                    continue


def _found(path: bytes, dev: int, remaining: Set[int], found: Dict) -> None:
    st = os.lstat(path)
    if st.st_dev != dev or st.st_ino not in remaining:
        return  # d_ino of a mount point differs from what stat says; not our file
    remaining.discard(st.st_ino)
    found[(dev, st.st_ino)] = FileInfo(dev=dev, ino=st.st_ino, path=path,
                                       size=st.st_size if stat.S_ISREG(st.st_mode) else None,
                                       mtime_ns=st.st_mtime_ns, ctime_ns=st.st_ctime_ns,
                                       extents=_extents(path) if stat.S_ISREG(st.st_mode) else None)


def _extents(path: bytes):
    """Where the file's bytes are now, i.e. where the recorded reads found them."""
    try:
        return mapped_extents(path)
    except OSError:
        return None   # no FIEMAP here (tmpfs, FUSE, ...): the analyzer uses today's layout
