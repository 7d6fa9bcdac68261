"""XFS: FIEMAP answers byte offsets on the data device (xfs_bmapi daddr -> bytes), st_dev is the
data device. Files on a realtime device (XFS_XFLAG_REALTIME) are not handled: their FIEMAP
addresses the rt device, which this does not look up. metadata: warmed through the file system (FileSystem.metadata "fs"; fs/metadata.py)."""

from .generic import FileSystem


class Xfs(FileSystem):
    fstypes = ("xfs",)
    name = "xfs"
