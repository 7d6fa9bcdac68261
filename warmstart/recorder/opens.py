"""The files opened while a launch runs, by name: fanotify FAN_OPEN|FAN_OPEN_EXEC marks on every
file system that can hold a launch's file data. Turning inodes into paths from these names
(resolve.py) needs no walk of whole file systems; the walk is left for what no open names (a
file opened before the recording, or by a path of another namespace).

The queue is read only after the launch (no work of ours while it runs), by a child process:
each event comes with an open fd of the file, whose /proc/self/fd link is its path, and closing
it in the recorder would drop the recorder's SQLite locks (OpenWatch.take). Opens by every
process are queued; any name is as good as the app's own, since resolve checks each name's
(dev, ino).
"""

import ctypes
import os
import subprocess
import sys
from typing import Dict, Iterable, List, Optional, Set

from ..errors import WarmstartError

FAN_CLASS_NOTIF = 0x0
FAN_CLOEXEC = 0x1
FAN_NONBLOCK = 0x2
FAN_MARK_ADD = 0x1
FAN_MARK_FILESYSTEM = 0x100
FAN_OPEN = 0x20
FAN_OPEN_EXEC = 0x1000
AT_FDCWD = -100
# Reads the queue (fd argv[1]) in a process of its own (see take): "PID:NAME" of each open (the
# opener's pid, the file's name), NUL-ended; an empty record where the queue overflowed; "END" once
# all are written. Then it closes stdout, and only then the events' fds: closing a file can start
# its write-back and wait for a busy disk (ext4 does so for a file truncated and rewritten, as
# another program's `dd of=FILE` leaves it), which nobody should wait for.
READER = r"""
import os, resource, struct, sys
fd, meta, out = int(sys.argv[1]), struct.Struct("=IBBHQii"), sys.stdout.buffer   # fanotify_event_metadata
soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
held = []
while True:
    try:
        buf = os.read(fd, 65536)
    except BlockingIOError:
        break
    if not buf:
        break
    pos = 0
    while pos + meta.size <= len(buf):
        event_len, _, _, _, mask, efd, pid = meta.unpack_from(buf, pos)
        pos += max(event_len, meta.size)
        if mask & 0x4000:                  # FAN_Q_OVERFLOW
            out.write(b"\0")
        if efd < 0:
            continue
        try:
            out.write(b"%d:" % pid + os.readlink(b"/proc/self/fd/%d" % efd) + b"\0")
        except OSError:
            pass
        held.append(efd)
        if len(held) > hard - 256:         # no fd left for the next events: close them now
            for f in held:
                os.close(f)
            held = []
out.write(b"END\0")
out.flush()
os.close(1)
for f in held:
    os.close(f)
"""


class OpenWatch:
    """`with OpenWatch(mount points):` queues the opens on their file systems; take() reads
    them (once, after the launch) as paths. A file system that refuses a mark is named in
    `unmarked`; the recording goes on (the walk covers it)."""

    def __init__(self, targets: Iterable[bytes]):
        self.targets = list(targets)
        self.fd: Optional[int] = None
        self.unmarked: List[bytes] = []
        self.overflow = False
        self.openers: Dict[bytes, Set[int]] = {}   # name -> pids that opened it (after take)
        self._reader: Optional[subprocess.Popen] = None

    def __enter__(self) -> "OpenWatch":
        libc = ctypes.CDLL(None, use_errno=True)
        # the kernel's default queue (16384 events): a busy machine's opens cannot grow it without
        # bound during a long recording; past it names are lost (overflow) and the walk finds them
        fd = libc.fanotify_init(FAN_CLASS_NOTIF | FAN_CLOEXEC | FAN_NONBLOCK,
                                os.O_RDONLY | os.O_LARGEFILE | os.O_CLOEXEC)
        if fd < 0:
            err = ctypes.get_errno()
            raise WarmstartError(f"fanotify_init: {os.strerror(err)} (needs root and a kernel with fanotify)")
        self.fd = fd
        mark = libc.fanotify_mark
        mark.argtypes = [ctypes.c_int, ctypes.c_uint, ctypes.c_uint64, ctypes.c_int, ctypes.c_char_p]
        for t in self.targets:
            if mark(fd, FAN_MARK_ADD | FAN_MARK_FILESYSTEM, FAN_OPEN | FAN_OPEN_EXEC, AT_FDCWD, t) != 0:
                self.unmarked.append(t)
        return self

    def take(self) -> List[bytes]:
        """The paths opened since __enter__ (each once, in order of the first open; `openers` says
        by which processes). The queue is
        read by a child process (READER): each event brings an open fd of its file, and closing
        an fd of a file drops every POSIX lock the closing process holds on it. Read here, the
        event of anyone's open of the warmstart database (this process's SQLite connection, the
        learner's) would release this process's SQLite locks, and another connection could then
        write under it: "database disk image is malformed"."""
        if self.fd is None:
            return []
        try:
            reader = subprocess.Popen([sys.executable, "-I", "-S", "-c", READER, str(self.fd)], pass_fds=(self.fd,),
                                      stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
        except OSError:
            self.overflow = True     # names lost: the walk finds what they would have named
            return []
        with reader.stdout:
            records = reader.stdout.read().split(b"\0")[:-1]   # up to END; its closes are not waited for
        self._reader = reader
        complete = records[-1:] == [b"END"]
        self.overflow = not complete
        out = []
        for record in records[:-1] if complete else records:
            pid, _, path = record.partition(b":")
            if not record:
                self.overflow = True
            elif path.startswith(b"/") and not path.endswith(b" (deleted)"):
                if path not in self.openers:
                    self.openers[path] = set()
                    out.append(path)
                self.openers[path].add(int(pid))
        return out

    def __exit__(self, *exc):
        if self._reader is not None:
            self._reader.poll()      # reaped if done; else by subprocess later
            self._reader = None
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None
        return False
