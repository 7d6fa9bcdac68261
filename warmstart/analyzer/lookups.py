"""The directories a launch looked names up in that no scheduled path passes, for the metadata
step to read whole (docs/replayer.md, "Directories the launch looked in").

The export has the step read every directory on a scheduled file's path (fs.metadata.directories_on;
whole where the file system lists directories, FileSystem.list_dirs: XFS). A launch also looks up
names elsewhere: a build tool's per-directory config files that do not exist (git's
`.gitattributes` in each directory of a diffstat), a locale file, a symlink in /usr/lib64. Each such
lookup, cold, reads the directory's inode and blocks one dependent read at a time in the app's
own order; in the step they are read in inode order (an XFS directory's blocks lie near its
inode), before the data. The recorder stores the lookups where the file system names them
(FileSystem.lookup_event: XFS's xfs_lookup gives the directory's inode and the name); here each
directory inode becomes a path by walking the lookups from the file system's root and the
directories on the schedule's paths (a looked-up name that is a directory is the parent of later
lookups).

A directory is read whole only where that costs no more reads than the launch's lookups in it
made: its blocks (st_size / st_blksize, rounded up) at most the distinct names looked up in it.
A big directory with one name looked up (/usr/share for `locale`) is left to the app's own lookup.
"""

import os
import stat
from typing import Dict, Iterable, List, Sequence, Set, Tuple

from ..db import recordings as db
from ..fs import FileSystems
from ..fs.metadata import directories_on, listed_dirs


Dir = Tuple[bytes, os.stat_result]


def _resolve(lookups: Sequence[Tuple[int, bytes]], seeds: Dict[int, Dir]) -> Dict[int, Dir]:
    """Directory inode -> (path, its lstat), from the seeds (known directories) and every
    looked-up name that is a directory now, repeated until nothing more resolves."""
    known = dict(seeds)
    tried: Set[bytes] = set()
    grew = True
    while grew:
        grew = False
        for dino, name in lookups:
            parent = known.get(dino)
            if parent is None:
                continue
            path = os.path.join(parent[0], name)
            if path in tried:
                continue
            tried.add(path)
            try:
                st = os.lstat(path)
            except OSError:
                continue
            if stat.S_ISDIR(st.st_mode) and st.st_ino not in known:
                known[st.st_ino] = (path, st)
                grew = True
    return known


def _by_dev(conn, rids: Iterable[int]) -> Dict[int, List[Tuple[int, bytes]]]:
    """st_dev -> the recordings' lookups on it [(directory inode, name)], in order."""
    by_dev: Dict[int, List[Tuple[int, bytes]]] = {}
    for rid in rids:
        for dev, dino, name in db.load_lookups(conn, rid):
            by_dev.setdefault(dev, []).append((dino, name))
    return by_dev


def _known_dirs(fs, dev: int, events: Sequence[Tuple[int, bytes]], on_paths: List[Dir]) -> Dict[int, Dir]:
    """Directory inode -> (path, lstat) on dev: resolved from the file system's root (where its
    mount shows the root) and the directories on the schedule's paths."""
    seeds = {st.st_ino: (d, st) for d, st in on_paths if st.st_dev == dev}
    try:
        st = os.lstat(fs.mount.target)
        if fs.mount.root == b"/" and st.st_dev == dev:
            seeds[st.st_ino] = (fs.mount.target, st)
    except OSError:
        pass
    return _resolve(events, seeds)


def looked_up_names(conn, rids: Iterable[int], scheduled: Iterable[bytes], fss: FileSystems) -> List[bytes]:
    """Every name the launch looked up that is there now and no directory (a file it only
    stat'ed or opened, a symlink it followed: /lib64/ld-linux-x86-64.so.2 on the way to the
    dynamic loader, /etc/alternatives/vim), as a path, sorted: the names FileMap.inode_lookups
    tries first when it names the inode clusters the launch read."""
    by_dev = _by_dev(conn, rids)
    on_paths = directories_on(scheduled)
    out: Set[bytes] = set()
    for dev, events in by_dev.items():
        fs = fss.of_dev(dev)
        if fs is None:
            continue
        known = _known_dirs(fs, dev, events, on_paths)
        for dino, name in events:
            parent = known.get(dino)
            if parent is None:
                continue
            path = os.path.join(parent[0], name)
            try:
                st = os.lstat(path)
            except OSError:
                continue
            if not stat.S_ISDIR(st.st_mode) and st.st_dev == dev:
                out.add(path)
    return sorted(out)


def lookup_dirs(conn, rids: Iterable[int], scheduled: Iterable[bytes], fss: FileSystems) -> Tuple[List[bytes], dict]:
    """(the directories to read whole, sorted; what was found: counts for the schedule's params)."""
    by_dev = _by_dev(conn, rids)
    report = {"lookups": sum(len(v) for v in by_dev.values()), "dirs": 0, "listed": 0, "too_big": 0,
              "unresolved_dirs": 0}
    if not by_dev:
        return [], report
    on_paths = directories_on(scheduled)
    on_path_names = {d for d, _ in on_paths}
    out: List[bytes] = []
    for dev in listed_dirs(by_dev):
        fs = fss.of_dev(dev)
        if fs is None:
            continue
        events = by_dev[dev]
        known = _known_dirs(fs, dev, events, on_paths)
        names: Dict[int, Set[bytes]] = {}
        for dino, name in events:
            names.setdefault(dino, set()).add(name)
        report["unresolved_dirs"] += sum(d not in known for d in names)
        for dino, looked in names.items():
            path, st = known.get(dino, (None, None))
            if path is None or path in on_path_names:
                continue
            report["dirs"] += 1
            blocks = -(-st.st_size // max(512, st.st_blksize))
            if blocks > len(looked):
                report["too_big"] += 1
                continue
            out.append(path)
    out.sort()
    report["listed"] = len(out)
    return out, report
