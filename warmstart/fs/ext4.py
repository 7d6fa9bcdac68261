"""ext4 (and ext2/ext3): one block device, FIEMAP answers byte offsets on it; st_dev is that
device, so the page cache's (dev, ino) is the file's stat. The generic answers hold, but for
metadata: ext2/3/4 read it through buffer heads of the block device's mapping, so raw reads of
the device by LBA warm it (fs/metadata.py)."""

from .generic import FileSystem


class Ext4(FileSystem):
    fstypes = ("ext4", "ext3", "ext2")
    name = "ext4"
    metadata = "bdev"
