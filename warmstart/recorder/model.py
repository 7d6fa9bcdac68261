"""What a recording is made of, independent of the backend that captured it and of SQL.

Units follow warmstart/db/schema.py: sectors of 512 bytes, dev_t from os.makedev, times in
integer nanoseconds (CLOCK_MONOTONIC while recording, relative to the launch start once stored).
"""

from dataclasses import dataclass, field
from typing import Dict, List, Optional


@dataclass
class BlockRequest:
    dev: int
    sector: int
    nr_sectors: int
    rwbs: str
    issue_ns: int
    queue_ns: Optional[int] = None
    complete_ns: Optional[int] = None
    pid: Optional[int] = None        # the submitter's process (tgid) when known, else the issuer
    tid: Optional[int] = None        # the submitting (or issuing) thread
    comm: Optional[str] = None
    cpu_before_ns: int = 0           # c_i, see docs/recording.md

    @property
    def is_write(self) -> bool:
        return "W" in self.rwbs

    @property
    def is_readahead(self) -> bool:
        return "A" in self.rwbs

    @property
    def is_meta(self) -> bool:
        return "M" in self.rwbs

    def key(self):
        """What two backends must agree on for the same request (times compared separately)."""
        return (self.dev, self.sector, self.nr_sectors, self.rwbs, self.tid, self.comm)


@dataclass
class PageAdd:
    """A run of consecutive pages of one file added to the page cache."""
    t_ns: int
    dev: int
    ino: int
    first_index: int
    nr_pages: int
    tid: Optional[int] = None


@dataclass
class Process:
    pid: int                         # a thread id; `tgid` groups threads into processes
    tgid: int
    ppid: Optional[int] = None
    comm: Optional[str] = None
    exec_path: Optional[bytes] = None
    start_ns: Optional[int] = None
    exit_ns: Optional[int] = None
    oncpu_ns: int = 0


@dataclass
class FileInfo:
    dev: int
    ino: int
    path: Optional[bytes]
    size: Optional[int] = None
    mtime_ns: Optional[int] = None
    ctime_ns: Optional[int] = None
    extents: Optional[list] = None     # [(logical, physical, length, flags)] bytes, at record time


@dataclass
class UsedRun:
    """Consecutive pages of one file the launch used (read, faulted or mapped), cached or not."""
    dev: int
    ino: int
    first_index: int
    nr_pages: int


@dataclass
class Recording:
    """One recorded launch, times relative to its start; what recordings.insert_recording stores."""
    started_at: float
    launch_time_s: float
    end_reason: str
    exit_status: Optional[int]
    backend: str
    cold_method: str
    lost_events: int = 0
    cpu_total_s: Optional[float] = None
    cpu_tail_ns: int = 0
    warm_cpu_s: Optional[float] = None
    env: Dict = field(default_factory=dict)
    requests: List[BlockRequest] = field(default_factory=list)
    page_adds: List[PageAdd] = field(default_factory=list)
    page_uses: Optional[List[UsedRun]] = None     # None: not traced (older recorders)
    processes: List[Process] = field(default_factory=list)
    files: List[FileInfo] = field(default_factory=list)

    @property
    def status(self) -> str:
        return "lost-events" if self.lost_events else "ok"
