"""Make the next launch cold: drop the page cache, or evict only what the app used before.

drop_caches (default): dirty pages written, then `echo 3 > /proc/sys/vm/drop_caches`: the machine's
  clean page cache, dentries and inodes go; every other program's next reads are cold too.
evict: posix_fadvise(POSIX_FADV_DONTNEED) on the files of the app's previous recording, and on
  the byte ranges of the block devices its metadata requests read (the buffer cache). Dentries
  and inodes stay cached (the kernel has no per-file way to drop them), so an evict-cold launch
  may show fewer metadata reads than a drop_caches-cold one. Without a previous recording,
  evict falls back to drop_caches and says so.
none: leave the cache alone (warm launches; tests of the recorder itself).

Dirty pages are neither dropped nor evicted, so they are written first. A global sync() waits for
every file system's dirty pages, also those another program is writing to a slow disk the launch
never reads (seconds, on a shared machine with emulated disks). The recorder instead starts a
syncfs of each file system at once (Writeback) and waits only for those the launch is expected to
read (the root's, its working directory's, its executable's, those of the paths in its
arguments and of its --device, those its latest recording read files from); the others count as
written if their sync is done at the drop (a file system with nothing dirty: at once). A launch
that read from one still being written is found after the launch (unsynced) and recorded again
after a full sync.
"""

import os
import shutil
import subprocess
from typing import Callable, Dict, Iterable, List, Optional, Sequence, Set, Tuple

from ..errors import WarmstartError
from ..fs import FileSystems

METHODS = ("drop_caches", "evict", "none")
# file systems with no writeback (memory or kernel state): nothing of theirs is dirty on a disk
NO_WRITEBACK = frozenset({"tmpfs", "devtmpfs", "ramfs", "proc", "sysfs", "cgroup", "cgroup2", "devpts",
                          "tracefs", "debugfs", "securityfs", "pstore", "bpf", "mqueue", "hugetlbfs",
                          "configfs", "fusectl", "autofs", "binfmt_misc", "efivarfs", "nsfs", "rpc_pipefs"})


class Writeback:
    """A syncfs of every file system that writes back, each by a `sync -f` process of its own,
    all started now. Processes, not threads: a thread still in syncfs keeps this process from
    exiting, and the sync of a disk another program is filling may outlast the recording.
    start() gives None where there is no `sync` program (coreutils): sync() then."""

    def __init__(self, fss: FileSystems, program: str):
        self.devs = set()
        self._procs: Dict[int, subprocess.Popen] = {}
        for dev, fs in fss.items():
            if fs.mount.fstype in NO_WRITEBACK:
                continue
            self.devs.add(dev)
            if not _reachable(fss, fs):
                continue     # never counted as written
            try:
                self._procs[dev] = subprocess.Popen([program, "-f", fs.mount.target], stdin=subprocess.DEVNULL,
                                                    stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            except OSError:
                continue     # never counted as written

    @classmethod
    def start(cls, fss: FileSystems) -> "Optional[Writeback]":
        program = shutil.which("sync", path=os.pathsep.join([os.environ.get("PATH", ""), "/usr/bin", "/bin"]))
        return None if program is None else cls(fss, program)

    def wait(self, needed: Iterable[int]) -> Set[int]:
        """Wait for the syncs of the file systems `needed` (devs); returns the devs of those
        whose sync is done."""
        for dev in needed:
            if dev in self._procs:
                self._procs[dev].wait()
        return {dev for dev, p in self._procs.items() if p.poll() == 0}


def drop_caches() -> None:
    """Write every dirty page, then drop page cache, dentries and inodes (VM-wide)."""
    os.sync()  # dirty pages are not dropped; write them first
    release_pinned()
    _drop()


def _reachable(fss: FileSystems, fs) -> bool:
    """Is fs reachable at its mount point (not hidden by another mount)?"""
    top = fss.of_path(fs.mount.target)
    return top is not None and top.mount.dev == fs.mount.dev


def release_pinned(devs: Optional[Iterable[int]] = None) -> List[str]:
    """Let the drop take the metadata blocks a file system still holds once written (ext4's
    journal pins every block changed since its last checkpoint, e.g. the inode blocks of the
    files and symlinks whose atime the last launch updated; drop_caches skips them, and a launch
    recorded then misses their reads, which a later launch makes after the release, one seek
    each behind the replay's sweep). Of the file systems `devs` (None: all) whose dirty pages
    were written; returns why it failed where it did (the drop goes on)."""
    fss = FileSystems()
    wanted = None if devs is None else set(devs)
    out = []
    for dev, fs in fss.items():
        if (wanted is not None and dev not in wanted) or not _reachable(fss, fs):
            continue
        why = fs.release_pinned_metadata()
        if why:
            out.append(why)
    return out


def _drop() -> None:
    try:
        with open("/proc/sys/vm/drop_caches", "w") as f:
            f.write("3\n")
    except PermissionError:
        raise WarmstartError("cannot write /proc/sys/vm/drop_caches: permission denied; run as root, "
                             "or use --cold=evict")
    except OSError as e:
        raise WarmstartError(f"cannot write /proc/sys/vm/drop_caches: {e.strerror}; use --cold=evict")


def _write_dirty(writeback: Optional[Writeback], needed: Iterable[int]) -> Optional[Set[int]]:
    if writeback is None:
        os.sync()  # dirty pages are not dropped; write them first
        return None
    return writeback.wait(needed)


def evict(files: Iterable[bytes], device_ranges: Iterable[Tuple[str, int, int]], say: Callable[[str], None]) -> int:
    """DONTNEED on files (paths) and device byte ranges (node, offset, length), every dirty page
    written first; returns how many files were evicted."""
    os.sync()
    return _evict(files, device_ranges, say)


def _evict(files: Iterable[bytes], device_ranges: Iterable[Tuple[str, int, int]], say: Callable[[str], None]) -> int:
    """(evict without the sync) A file that is gone is skipped with a warning."""
    n = 0
    for path in files:
        try:
            fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
        except OSError as e:
            say(f"evict: skipping {os.fsdecode(path)}: {e.strerror}")
            continue
        try:
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            n += 1
        finally:
            os.close(fd)
    for node, offset, length in device_ranges:
        try:
            fd = os.open(node, os.O_RDONLY)
        except OSError as e:
            say(f"evict: cannot open {node} to drop its buffer cache: {e.strerror}")
            continue
        try:
            os.posix_fadvise(fd, offset, length, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)
    return n


def make_cold(method: str, previous_files: Sequence[bytes], device_ranges: Sequence[Tuple[str, int, int]],
              say: Callable[[str], None], writeback: Optional[Writeback] = None,
              needed: Iterable[int] = ()) -> Tuple[str, Optional[Set[int]]]:
    """Apply the method; returns the method actually used (evict may fall back) and the devs of
    the file systems whose dirty pages were written first (None: all of them, by sync(); see
    Writeback for `writeback` and `needed`)."""
    if method not in METHODS:
        raise WarmstartError(f"unknown --cold {method!r}: use {', '.join(METHODS)}")
    if method == "none":
        return "none", None
    written = _write_dirty(writeback, needed)
    for why in release_pinned(written):
        say(f"cold cache: {why}; metadata the last launch changed may stay cached")
    if method == "evict":
        if previous_files:
            _evict(previous_files, device_ranges, say)
            return "evict", written
        say("--cold=evict: no previous recording of this app to take its files from; using drop_caches")
    _drop()
    return "drop_caches", written


def unsynced(devs_read: Set[int], devs: Set[int], written: Set[int], names_lost: bool,
             fss: FileSystems) -> List[bytes]:
    """Mount points of the file systems (of those that write back, `devs`) a launch read from
    (`devs_read`) whose sync was not done at the cache drop (`written`): pages of theirs may have
    been dirty, so still cached, when the launch read them. Every such file system if the names
    the launch opened were lost (names_lost): then what it read is not known."""
    left = devs - written
    suspect = left if names_lost else left & devs_read
    return sorted(fss.of_dev(d).mount.target for d in suspect)
