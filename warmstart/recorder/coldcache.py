"""Make the next launch cold: drop the page cache, or evict only what the app used before.

drop_caches (default): sync, then `echo 3 > /proc/sys/vm/drop_caches`: the whole machine's
  clean page cache, dentries and inodes go; every other program's next reads are cold too.
evict: posix_fadvise(POSIX_FADV_DONTNEED) on the files of the app's previous recording, and on
  the byte ranges of the block devices its metadata requests read (the buffer cache). Dentries
  and inodes stay cached (the kernel has no per-file way to drop them), so an evict-cold launch
  may show fewer metadata reads than a drop_caches-cold one. Without a previous recording,
  evict falls back to drop_caches and says so.
none: leave the cache alone (warm launches; tests of the recorder itself).
"""

import os
from typing import Callable, Iterable, Sequence, Tuple

from ..errors import WarmstartError

METHODS = ("drop_caches", "evict", "none")


def drop_caches() -> None:
    os.sync()  # dirty pages are not dropped; write them first
    try:
        with open("/proc/sys/vm/drop_caches", "w") as f:
            f.write("3\n")
    except PermissionError:
        raise WarmstartError("cannot write /proc/sys/vm/drop_caches: permission denied; run as root, "
                             "or use --cold=evict")
    except OSError as e:
        raise WarmstartError(f"cannot write /proc/sys/vm/drop_caches: {e.strerror}; use --cold=evict")


def evict(files: Iterable[bytes], device_ranges: Iterable[Tuple[str, int, int]], say: Callable[[str], None]) -> int:
    """DONTNEED on files (paths) and device byte ranges (node, offset, length); returns how many
    files were evicted. A file that is gone is skipped with a warning."""
    os.sync()
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
              say: Callable[[str], None]) -> str:
    """Apply the method; returns the method actually used (evict may fall back)."""
    if method not in METHODS:
        raise WarmstartError(f"unknown --cold {method!r}: use {', '.join(METHODS)}")
    if method == "none":
        return "none"
    if method == "evict":
        if previous_files:
            evict(previous_files, device_ranges, say)
            return "evict"
        say("--cold=evict: no previous recording of this app to take its files from; using drop_caches")
    drop_caches()
    return "drop_caches"
