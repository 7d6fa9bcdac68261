"""overlayfs (container images): it has no device; a file's page cache is that of the layer's
file it shows (the upper one if copied up, else the first lower layer holding it), whose
(dev, ino) the page-cache events carry. real_path() finds that file by the mount's
upperdir/lowerdir options; everything else is asked of the layer's own file system.
Whiteouts and opaque directories hide lower files: a path that exists in the merged view is
looked up top-down, so the first layer holding it is the one shown.
metadata: warmed through the file system (FileSystem.metadata "fs"; fs/metadata.py)."""

import os
from typing import List, Optional

from .generic import FileSystem


def _split_layers(value: bytes) -> List[bytes]:
    """lowerdir's colon-separated layers (a literal colon is escaped as \\:)."""
    out, cur, i = [], bytearray(), 0
    while i < len(value):
        if value[i:i + 2] == b"\\:":
            cur += b":"
            i += 2
            continue
        if value[i:i + 1] == b":":
            out.append(bytes(cur))
            cur = bytearray()
        else:
            cur += value[i:i + 1]
        i += 1
    out.append(bytes(cur))
    return [d for d in out if d]


class Overlay(FileSystem):
    fstypes = ("overlay",)
    name = "overlay"

    def layers(self) -> List[bytes]:
        """upperdir (if any), then the lowerdirs, top to bottom."""
        upper: List[bytes] = []
        lower: List[bytes] = []
        for opt in self.mount.options.split(b","):
            key, _, value = opt.partition(b"=")
            if key == b"upperdir":
                upper = [value]
            elif key == b"lowerdir":
                lower = _split_layers(value)
            elif key == b"lowerdir+":       # new mount API: one layer per option
                lower.append(value)
        return upper + lower

    def devices(self) -> List[int]:
        return []

    def cannot_map(self) -> Optional[str]:
        return None if self.layers() else "overlay mount without readable layer options"

    def real_path(self, path: bytes) -> Optional[bytes]:
        target = self.mount.target.rstrip(b"/")
        rel = path[len(target):].lstrip(b"/") if path.startswith(target) else None
        if rel is None:
            return None
        for layer in self.layers():
            cand = os.path.join(layer, self.mount.root.lstrip(b"/"), rel) if self.mount.root != b"/" \
                else os.path.join(layer, rel)
            if os.path.lexists(cand):
                return os.path.realpath(cand)
        return None
