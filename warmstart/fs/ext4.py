"""ext4 (and ext2/ext3): one block device, FIEMAP answers byte offsets on it; st_dev is that
device, so the page cache's (dev, ino) is the file's stat. The generic answers hold.
metadata: see fs/metadata.py."""

from .generic import FileSystem


class Ext4(FileSystem):
    fstypes = ("ext4", "ext3", "ext2")
    name = "ext4"
