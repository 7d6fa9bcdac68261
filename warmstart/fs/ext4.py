"""ext4 (and ext2/ext3): one block device, FIEMAP answers byte offsets on it; st_dev is that
device, so the page cache's (dev, ino) is the file's stat. The generic answers hold, but for
metadata: ext2/3/4 read it through buffer heads of the block device's mapping, so raw reads of
the device by LBA warm it (fs/metadata.py)."""

import errno
import fcntl
import os
import struct
from typing import Optional

from .generic import FileSystem

EXT4_IOC_CHECKPOINT = 0x4004662B   # _IOW('f', 43, __u32), Linux 5.13; flags 0: write back and drop


class Ext4(FileSystem):
    fstypes = ("ext4", "ext3", "ext2")
    name = "ext4"
    metadata = "bdev"

    def release_pinned_metadata(self) -> Optional[str]:
        """Checkpoint the journal (EXT4_IOC_CHECKPOINT). A metadata block changed since the last
        checkpoint (an inode whose atime a launch just updated) stays pinned by jbd2 after its
        write-back, and drop_caches cannot drop it: the next launch finds it cached. A file
        system without a journal pins nothing."""
        try:
            fd = os.open(self.mount.target, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        except OSError as e:
            return f"cannot open {os.fsdecode(self.mount.target)}: {e.strerror}"
        try:
            fcntl.ioctl(fd, EXT4_IOC_CHECKPOINT, struct.pack("I", 0))
        except OSError as e:
            if e.errno == errno.ENODEV:
                return None    # no journal
            why = {errno.ENOTTY: "the kernel has no EXT4_IOC_CHECKPOINT (before 5.13)",
                   errno.EINVAL: "the kernel has no EXT4_IOC_CHECKPOINT (before 5.13)",
                   errno.EPERM: "checkpointing the journal needs root"}.get(e.errno, e.strerror)
            return f"journal of {os.fsdecode(self.mount.target)} not checkpointed: {why}"
        finally:
            os.close(fd)
        return None
