"""inode -> path at record time: from the names the launch opened, then by walking what is left.

The kernel's page-cache tracepoint gives (s_dev, ino) only, s_dev being the file system's
(btrfs: the file system's anonymous dev, not a subvolume's st_dev; overlayfs: the layer's file
system). First every name seen opened while the launch ran (opens.OpenWatch), plus the command's
own paths, is stat'ed and keyed the way the page cache keys it (fs.FileSystems.key_and_real:
an overlay name becomes its layer's file). What is still unknown is found by walking the mounts
of its file system with scandir (d_ino needs no stat), never crossing into another mount,
stopping as soon as every wanted inode is found. Names are bytes throughout. What stays unknown
gets a reason (Unresolved). Runs after tracing has stopped: its own reads are in no recording.
"""

import os
import stat
from typing import Dict, Iterable, List, NamedTuple, Optional, Set, Tuple

from ..fs import FileSystems
from ..fs.generic import FileSystem
from ..model import FileInfo

Key = Tuple[int, int]


class Resolved(NamedTuple):
    files: List[FileInfo]            # every wanted (dev, ino); path None where unresolved
    reasons: Dict[Key, str]          # why each unresolved one is
    by_name: int                     # found from the names opened
    by_walk: int                     # found by walking


def resolve_inodes(wanted: Iterable[Key], names: Iterable[bytes] = (), fss: Optional[FileSystems] = None,
                   max_entries: int = 2_000_000) -> Resolved:
    """FileInfo for every (dev, ino) wanted, from `names` first, then walking."""
    fss = fss or FileSystems()
    want: Set[Key] = set(wanted)
    found: Dict[Key, FileInfo] = {}
    reasons: Dict[Key, str] = {}
    subvol: Dict[Key, int] = {}          # st_dev a name found it under (btrfs: the subvolume's)
    for name in dict.fromkeys(names):
        hit = fss.key_and_real(name)
        if hit is None or hit[0] not in want:
            continue
        key, real, st = hit
        if key in found and found[key].path != real and subvol.get(key) != st.st_dev:
            reasons[key] = (f"ambiguous: inode {key[1]} is {os.fsdecode(found[key].path)} and {os.fsdecode(real)} "
                            f"(two subvolumes of one file system; the page cache does not say which)")
            continue
        if key not in found:
            found[key] = _info(key, real, st, fss.of_path(real))
            subvol[key] = st.st_dev
    for key in reasons:
        found.pop(key, None)
    by_name = len(found)
    _walk_rest(want - set(found) - set(reasons), fss, found, reasons, max_entries)
    out = [found.get(k) or FileInfo(dev=k[0], ino=k[1], path=None) for k in sorted(want)]
    return Resolved(out, reasons, by_name, len(found) - by_name)


def _walk_rest(left: Set[Key], fss: FileSystems, found: Dict[Key, FileInfo], reasons: Dict[Key, str],
               budget: int) -> None:
    by_dev: Dict[int, Set[int]] = {}
    for dev, ino in left:
        by_dev.setdefault(dev, set()).add(ino)
    mount_points = {m.target for m in fss.mounts}
    for dev, inos in by_dev.items():
        fs = fss.of_dev(dev)
        if fs is None:
            for ino in inos:
                reasons[(dev, ino)] = (f"no file system with dev {os.major(dev)}:{os.minor(dev)} is mounted "
                                       f"here (unmounted since, or in another mount namespace)")
            continue
        tops = [m.target for m in fss.mounts if m.dev == dev]
        for top in sorted(tops, key=lambda t: fs.mount.target != t):
            _walk(top, fs, inos - {k[1] for k in found if k[0] == dev}, found, budget, mount_points)
        for ino in inos:
            if (dev, ino) not in found:
                reasons[(dev, ino)] = (f"no name opened during the launch and not found walking "
                                       f"{b', '.join(tops).decode(errors='replace')} (deleted, or hidden by a mount)")


def _walk(top: bytes, fs: FileSystem, wanted: Set[int], found: Dict, budget: int, mount_points: Set[bytes]) -> None:
    remaining = set(wanted)
    if not remaining:
        return
    try:
        if os.lstat(top).st_ino in remaining:
            _found(top, fs, remaining, found)
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
                        _found(entry.path, fs, remaining, found)
                    # a mount point is another file system (or another view): do not cross;
                    # a btrfs subvolume (another st_dev, no mount) is the same file system
                    if entry.is_dir(follow_symlinks=False) and entry.path not in mount_points:
                        stack.append(entry.path)
                except OSError:
                    continue


def _found(path: bytes, fs: FileSystem, remaining: Set[int], found: Dict) -> None:
    st = os.lstat(path)
    key = fs.cache_key(path, st)
    if key[0] != fs.dev or st.st_ino not in remaining:
        return
    remaining.discard(st.st_ino)
    found[key] = _info(key, path, st, fs)


def _info(key: Key, path: bytes, st: os.stat_result, fs: Optional[FileSystem]) -> FileInfo:
    regular = stat.S_ISREG(st.st_mode)
    return FileInfo(dev=key[0], ino=key[1], path=path, size=st.st_size if regular else None,
                    mtime_ns=st.st_mtime_ns, ctime_ns=st.st_ctime_ns,
                    extents=_extents(path, fs) if regular and fs is not None else None)


def _extents(path: bytes, fs: FileSystem):
    """Where the file's bytes are now, i.e. where the recorded reads found them (on the file
    system's data device, btrfs's logical addresses translated)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC | getattr(os, "O_NOATIME", 0))
    except OSError:
        return None
    try:
        return fs.extents(fd)
    except OSError:
        return None   # no FIEMAP here (tmpfs, FUSE, ...): the analyzer uses today's layout
    finally:
        os.close(fd)
