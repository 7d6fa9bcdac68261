"""This mount namespace's mounts, from /proc/self/mountinfo (whose fields escape space, tab,
newline and backslash). The one reader of that file: everything that needs a mount asks here."""

import os
from typing import List, NamedTuple, Optional

MOUNTINFO = "/proc/self/mountinfo"


class Mount(NamedTuple):
    dev: int          # st_dev of the file system (userspace dev_t)
    root: bytes       # the directory of the file system mounted here ("/": its root)
    target: bytes     # the mount point
    fstype: str
    source: bytes = b""     # what was mounted ("/dev/loop0", "overlay", "tmpfs")
    options: bytes = b""    # the file system's own (super) options ("lowerdir=...,upperdir=...")


def unescape(field: bytes) -> bytes:
    """Undo mountinfo's \\ooo octal escapes (file names are bytes and may hold any of them)."""
    if b"\\" not in field:
        return field        # the usual case, without the byte loop (`warmstart run` reads this file)
    out, i = bytearray(), 0
    while i < len(field):
        if field[i:i + 1] == b"\\" and field[i + 1:i + 4].isdigit():
            out.append(int(field[i + 1:i + 4], 8))
            i += 4
        else:
            out.append(field[i])
            i += 1
    return bytes(out)


def mounts() -> List[Mount]:
    """Every mount, in mountinfo's order (parents before the mounts on top of them)."""
    out = []
    with open(MOUNTINFO, "rb") as f:
        for line in f:
            left, _, right = line.partition(b" - ")
            fields = left.split()
            if len(fields) < 5:
                continue
            major, _, minor = fields[2].partition(b":")
            tail = right.split()
            out.append(Mount(os.makedev(int(major), int(minor)), unescape(fields[3]), unescape(fields[4]),
                             tail[0].decode() if tail else "", unescape(tail[1]) if len(tail) > 1 else b"",
                             unescape(tail[2]) if len(tail) > 2 else b""))
    return out


def mount_of_path(path: bytes, among: Optional[List[Mount]] = None) -> Optional[Mount]:
    """The mount a path (absolute, symlinks resolved) lies on: the last-mounted of the longest
    matching mount points (a later mount on the same point hides the earlier one)."""
    best = None
    for m in among if among is not None else mounts():
        t = m.target.rstrip(b"/")
        if path == m.target or path.startswith(t + b"/") or m.target == b"/":
            if best is None or len(m.target) >= len(best.target):
                best = m
    return best
