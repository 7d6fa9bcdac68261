"""warmstart's shared types, used from the database to the report: what a recording is made of
(independent of the backend that captured it), what a schedule is, what a device profile says.
No SQL and no dependency on any other warmstart module (numpy only inside DiskProfile's model,
imported when it runs).

Units follow warmstart/db/schema.py: sectors of 512 bytes, dev_t from os.makedev, times in
integer nanoseconds (CLOCK_MONOTONIC while recording, relative to the launch start once stored).
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Dict, List, Optional, Sequence, Tuple

if TYPE_CHECKING:
    import numpy as np  # numpy is imported where the model runs, not when the CLI starts


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
    busy_after_ns: Optional[int] = None   # CPU its dependent tasks spent after it completed (the bound's)
    busy_union_after_ns: Optional[int] = None   # wall time some launch task was on CPU after it completed

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
    extents: Optional[List[Extent]] = None   # FIEMAP's mappable extents at record time; None: not taken


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
    # names looked up past the dentry cache, (dev_t, directory inode, name), on file systems with
    # a lookup tracepoint (FileSystem.lookup_event: XFS)
    lookups: List[Tuple[int, int, bytes]] = field(default_factory=list)

    @property
    def status(self) -> str:
        return "lost-events" if self.lost_events else "ok"


# ---- schedules ----------------------------------------------------------------------------

@dataclass(frozen=True)
class ScheduledFile:
    """A file a schedule reads, with the identity the replayer checks before touching it."""
    path: bytes
    dev: int
    ino: int
    size: int
    mtime_ns: int
    ctime_ns: int


@dataclass(frozen=True)
class Extent:
    """One FIEMAP extent of a file (bytes; physical is relative to its file system's device)."""
    logical: int
    physical: int
    length: int
    flags: int = 0

    @property
    def physical_end(self) -> int:
        return self.physical + self.length


@dataclass(frozen=True)
class Range:
    """One read: `sector`/`nr_sectors` on block device `dev` (always set: it is the sort key).

    A file range also has `file` and `file_offset` (bytes): replay reads the file so the pages land
    in that file's page cache. A device range (file None) is metadata: replay reads the block device.
    `length` is in bytes.
    """
    dev: int
    sector: int
    nr_sectors: int
    length: int
    file: Optional[ScheduledFile] = None
    file_offset: Optional[int] = None
    orig_pos: Optional[int] = None      # p index (1-based) of its first access: interleave's order

    @property
    def is_metadata(self) -> bool:
        return self.file is None


@dataclass
class Segment:
    """q_i of the paper: p[first_p..last_p] (1-based, inclusive) of P, ranges in fetch order."""
    idx: int                 # 1 = the pre-buffer, fetched before the app is released
    first_p: int
    last_p: int
    t_disk_s: float          # t_i: disk time of the LBA-sorted segment
    cpu_s: float             # CPU time of the app within the segment
    bytes: int
    ranges: List[Range] = field(default_factory=list)


@dataclass
class Schedule:
    id: Optional[int]
    app_name: str
    algorithm: str
    probe: str
    t_exp_s: float
    total_bytes: int
    waste_bytes: int
    recording_ids: List[int]
    segments: List[Segment]
    files: List[ScheduledFile]
    extents: Dict[int, List[Extent]]   # file index in `files` -> its extents
    profile_id: Optional[int] = None
    created_at: float = 0.0
    stale: bool = False
    params: dict = field(default_factory=dict)

    @property
    def metadata_step_s(self) -> float:
        """Modelled time of the replayer's metadata step outside the segments' t_disk_s (XFS,
        btrfs: analyzer.access.metadata_step): 0 where block-device ranges warm the metadata, and
        where each segment's t_disk_s has its share (schedules analyzed since 2026-11-29); before
        that, the whole step, run before the first segment. Inside t_exp_s; the hold adds it to
        the pre-buffer."""
        step = self.params.get("metadata_step") or {}
        return 0.0 if self.step_by_segment else float(step.get("t_s", 0.0))

    @property
    def step_by_segment(self) -> bool:
        """Whether the metadata step was modelled segment by segment (each share in its segment's
        t_disk_s), so the replayer warms it so; else all of it before the first segment."""
        return "segments_s" in (self.params.get("metadata_step") or {})

    @property
    def read_files(self) -> List[ScheduledFile]:
        """The files some range reads data of, in `files` order (the rest are looked up only)."""
        read = {r.file for g in self.segments for r in g.ranges if r.file is not None}
        return [f for f in self.files if f in read]

    @property
    def prebuffer_s(self) -> float:
        """Modelled time until the replayer can release the app, as the exec's hold counts it:
        the first segment's t_i and all of the metadata step that may run before it. Split by
        segment, t_1 holds segment 1's share, but the replayer warms every name the launch only
        looked up and every directory it looked names up in before the pre-buffer, whatever
        share the model gave their reads, so the rest of the step may run first too
        (docs/hook.md, "Hold policy", has the launches that showed it)."""
        step = self.params.get("metadata_step") or {}
        before = float(step.get("t_s", 0.0))
        if self.step_by_segment and step["segments_s"]:
            before = max(0.0, before - float(step["segments_s"][0]))   # inside t_1 already
        return (self.segments[0].t_disk_s if self.segments else 0.0) + before

    def to_json(self) -> dict:
        """A JSON-safe dict; paths are given as surrogateescape'd str (bytes do not go to JSON)."""
        def fix(o):
            if isinstance(o, bytes):
                return o.decode("utf-8", "surrogateescape")
            if isinstance(o, dict):
                return {str(k): fix(v) for k, v in o.items()}
            if isinstance(o, (list, tuple)):
                return [fix(v) for v in o]
            return o
        return fix(asdict(self))


# ---- device profiles: DISK_ACCESS (docs/algorithms.md) ----------------------------------------

@dataclass
class DiskProfile:
    """A device's measured timing (`warmstart profile-disk`) and DISK_ACCESS from it: the modelled
    time to read a list of ranges in the given order.

    Per range: a fixed per-request overhead, then
    - nothing more if it starts where the previous one ended (one streaming transfer),
    - for a short forward gap the drive streams through (<= stream_bytes): the gap's transfer time
      or a switch, whichever is less,
    - otherwise an I/O switch: seek(distance) with the average rotational delay folded in,
      as measured by `profile-disk` (competitive-prefetching.md §5: f_seek, f_transfer),
    then the transfer at the rate of that location. The first range, and a change of device, cost
    one average switch (C_switch): where the head was is unknown.

    The model runs on numpy arrays because the optimising segmentation calls it thousands of times.
    """
    seek_curve: List[Tuple[float, float]]      # (distance bytes, seconds incl. avg rotation), ascending
    rate_curve: List[Tuple[float, float]]      # (byte offset, bytes/s), ascending
    overhead_s: float                          # per request, beyond seek and transfer
    stream_bytes: float                        # forward gaps the drive streams through
    c_switch_s: float                          # average I/O switch (competitive-prefetching.md)
    r_tr_Bps: float                            # average sequential transfer rate
    size_bytes: int = 0
    device: str = ""
    strip_bytes: int = 0                       # striped array geometry (0: not striped)
    stripe_disks: int = 0
    extra: dict = field(default_factory=dict)  # raw probe data and fit errors, for the report
    # What requests in flight together save (>= 1; 1 for profiles from before them): `parallel`,
    # how many times sooner sorted scattered 4 KiB reads complete with many in flight than one at
    # a time (their positioning overlaps); `parallel_rate`, scattered 1 MiB reads' rate with many in
    # flight over the fastest place's rate_curve (their transfers overlap). An SSD's requests
    # overlap, an HDD's barely. The model times one request at a time; the bound's floor
    # (analyzer/bound.floor_profile) uses them.
    parallel: float = 1.0
    parallel_rate: float = 1.0

    def to_json(self) -> str:
        return json.dumps(asdict(self), sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> "DiskProfile":
        d = json.loads(text)
        d["seek_curve"] = [tuple(x) for x in d["seek_curve"]]
        d["rate_curve"] = [tuple(x) for x in d["rate_curve"]]
        return cls(**d)

    @property
    def overlaps(self) -> bool:
        """Whether requests in flight together complete sooner than one at a time (an SSD: yes;
        an HDD, or a profile from before they were measured: no)."""
        return self.parallel > 1.0 or self.parallel_rate > 1.0

    def in_flight(self) -> "DiskProfile":
        """The profile of a fetch with many requests in flight, as the replayer's (its engines
        queue each segment's ranges without waiting): overhead and switches divided by `parallel`,
        rates times `parallel_rate`. Itself unless it `overlaps`."""
        if not self.overlaps:
            return self
        par, rate = max(1.0, self.parallel), max(1.0, self.parallel_rate)
        import dataclasses
        return dataclasses.replace(self, seek_curve=[(d, t / par) for d, t in self.seek_curve],
                                   c_switch_s=self.c_switch_s / par, overhead_s=self.overhead_s / par,
                                   rate_curve=[(o, r * rate) for o, r in self.rate_curve],
                                   r_tr_Bps=self.r_tr_Bps * rate, parallel=1.0, parallel_rate=1.0)

    @property
    def gap_merge_bytes(self) -> int:
        """Competitive prefetch depth: what transfers during one average switch (C_switch x R_tr)."""
        return int(self.c_switch_s * self.r_tr_Bps)

    # -- curves ----------------------------------------------------------------------------
    def _arrays(self):
        import numpy as np
        if not hasattr(self, "_cache"):
            sd = np.array([max(1.0, d) for d, _ in self.seek_curve], dtype=float)
            st = np.array([t for _, t in self.seek_curve], dtype=float)
            ro = np.array([o for o, _ in self.rate_curve], dtype=float)
            rr = np.array([r for _, r in self.rate_curve], dtype=float)
            object.__setattr__(self, "_cache", (np.log(sd), st, ro, rr))
        return self._cache

    def seek_s(self, distance):
        """Switch time (seek + average rotation) for a distance in bytes (scalar or array)."""
        import numpy as np
        lsd, st, _, _ = self._arrays()
        return np.interp(np.log(np.maximum(1.0, np.abs(distance))), lsd, st)

    def rate(self, offset):
        import numpy as np
        _, _, ro, rr = self._arrays()
        return np.interp(offset, ro, rr)

    # -- DISK_ACCESS -----------------------------------------------------------------------
    def access_time_arrays(self, dev: np.ndarray, start: np.ndarray, length: np.ndarray) -> float:
        """Seconds to read ranges (byte start, byte length on device dev) in this order, QD 1."""
        import numpy as np
        n = len(start)
        if n == 0:
            return 0.0
        start = start.astype(float)
        length = length.astype(float)
        transfer = length / self.rate(start)
        prev_end = np.empty(n)
        prev_end[0] = 0
        prev_end[1:] = start[:-1] + length[:-1]
        gap = start - prev_end
        same_dev = np.ones(n, dtype=bool)
        same_dev[0] = False
        same_dev[1:] = dev[1:] == dev[:-1]
        switch = self.seek_s(gap)
        fwd = (gap > 0) & (gap <= self.stream_bytes)
        switch = np.where(fwd, np.minimum(switch, gap / self.rate(prev_end)), switch)
        switch = np.where(gap == 0, 0.0, switch)
        switch = np.where(same_dev, switch, self.c_switch_s)
        over = np.where(same_dev & (gap == 0), 0.0, self.overhead_s)
        return float(np.sum(transfer + switch + over))

    def scattered_time(self, ranges: Sequence[Tuple[int, int, int]]) -> float:
        """Seconds to read [(dev, byte start, byte length), ...] one at a time in an order not
        known here: each an average switch (C_switch), its overhead and its transfer."""
        import numpy as np
        if not ranges:
            return 0.0
        a = np.array(ranges, dtype=np.int64)
        return float(len(a) * (self.c_switch_s + self.overhead_s) + np.sum(a[:, 2] / self.rate(a[:, 1].astype(float))))

    def access_time(self, ranges: Sequence[Tuple[int, int, int]]) -> float:
        """Seconds to read [(dev, byte start, byte length), ...] in the given order."""
        import numpy as np
        if not ranges:
            return 0.0
        a = np.array(ranges, dtype=np.int64)
        return self.access_time_arrays(a[:, 0], a[:, 1], a[:, 2])
