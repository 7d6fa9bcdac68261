"""relocate_apps: plan, check, move, re-analyze; the library behind `warmstart relocate`.

Order of work, so that a refusal or a crash never leaves a half-done state that matters:
1. read the schedules, pick the file system, refuse what must not move (nothing touched yet);
2. plan the region; drop pieces from its tail while the free space does not cover it;
3. dry run: stop here with the report and the modelled launch times;
4. allocate the donor (unlinked: freed by the kernel if we die), move piece by piece with
   EXT4_IOC_MOVE_EXT, close the donor (its blocks are now the files' old places, freed);
5. record the relocation, remap every active schedule that reads a moved file.
"""

import os
import signal
from dataclasses import asdict, dataclass, field
from typing import Callable, Dict, List, Optional, Sequence, Tuple

from ..db.schedules import active_schedule_ids, insert_relocation, load_active_schedule, load_schedule
from ..model import Schedule
from ..errors import WarmstartError
from ..analyzer.access import schedule_cost, schedule_profile
from ..fiemap import Placement, fiemap_fd
from . import checks, donor as donors, planner
from .moveext import MoveError, move_extent
from .reanalyze import reanalyze

# Leave this much free space beyond the region (ext4 needs room for metadata and other writers).
RESERVE_FRACTION = 0.02
RESERVE_MIN_BYTES = 8 << 20


@dataclass
class Report:
    apps: List[str]
    dry_run: bool
    fs_type: str = ""
    mountpoint: str = ""
    block_size: int = 0
    granularity: str = "auto"
    region_bytes: int = 0
    free_bytes: int = 0
    region: Optional[dict] = None               # where the donor landed (real runs)
    pieces: List[dict] = field(default_factory=list)
    moved_files: int = 0
    moved_bytes: int = 0
    refused: List[dict] = field(default_factory=list)   # {"path", "reason"}
    warnings: List[str] = field(default_factory=list)
    model_before: Dict[str, dict] = field(default_factory=dict)   # analyzer/access.schedule_cost
    cost_model: Dict[str, str] = field(default_factory=dict)     # app -> the profile it is modelled with
    model_after: Dict[str, dict] = field(default_factory=dict)
    extents_before: int = 0
    extents_after: int = 0
    reanalysis: List[dict] = field(default_factory=list)
    relocation_id: Optional[int] = None
    interrupted: bool = False

    def to_json(self) -> dict:
        return asdict(self)


def _all_active(conn) -> List[Schedule]:
    return [load_schedule(conn, sid) for sid in active_schedule_ids(conn)]


def _fs_of(files: Dict[bytes, os.stat_result]) -> int:
    """The file system holding most of the bytes: the region goes there."""
    by_dev: Dict[int, int] = {}
    for st in files.values():
        by_dev[st.st_dev] = by_dev.get(st.st_dev, 0) + st.st_size
    if not by_dev:
        raise WarmstartError("the schedules read no file that still exists: re-record the apps")
    return max(by_dev, key=lambda d: (by_dev[d], -d))


def relocate_apps(conn, names: Sequence[str], dry_run: bool = False, granularity: str = "auto",
                  progress: Optional[Callable[[str], None]] = None) -> Report:
    """Relocate the files the active schedules of `names` read into one contiguous region.

    Raises WarmstartError when nothing can be done (unknown app, no schedule, not ext4); files
    that cannot move are listed in report.refused with the reason and the rest still move.
    """
    say = progress or (lambda msg: None)
    if granularity not in planner.GRANULARITIES:
        raise WarmstartError(f"unknown granularity {granularity!r}: use one of {', '.join(planner.GRANULARITIES)}")
    targets: Dict[str, Schedule] = {}
    for name in dict.fromkeys(names):
        s = load_active_schedule(conn, name)
        if s is None:
            raise WarmstartError(f"{name!r} has no schedule yet: run `warmstart analyze {name}` first")
        targets[name] = s
    report = Report(apps=list(targets), dry_run=dry_run, granularity=granularity)

    # 1. The files, the file system, the refusals.
    stats, movable, dev, mnt, vfs = _movable_files(targets, report)
    block = vfs.f_bsize
    page_blocks = max(1, os.sysconf("SC_PAGE_SIZE") // block)

    # 2. The layout, trimmed to the free space.
    all_active = _all_active(conn)
    layout = _fitting_layout(targets, all_active, movable, block, page_blocks, granularity, vfs, report)

    # 3. The model, before and (predicted) after, on each schedule's device profile.
    profiles = {name: schedule_profile(conn, s)[1:] for name, s in targets.items()}
    predicted = _predicted_locator(layout, _median_sector(targets.values()))
    for name, s in targets.items():
        prof, report.cost_model[name] = profiles[name]
        report.model_before[name] = schedule_cost(s, prof).as_dict()
        report.model_after[name] = schedule_cost(s, prof, predicted).as_dict()
    if dry_run or not layout.pieces:
        report.moved_files = len({p.path for p in layout.pieces}) if dry_run else 0
        report.moved_bytes = layout.region_bytes if dry_run else 0
        return report

    # 4. Move.
    say(f"allocating a {layout.region_bytes >> 20} MiB region on {report.mountpoint}")
    d = donors.allocate(mnt, layout.region_bytes, report.free_bytes)
    report.region = d.describe()
    if not d.contiguous():
        report.warnings.append(f"the free space is fragmented: the region has {d.discontinuities} "
                               f"jumps over {d.span >> 20} MiB; launches improve less")
    try:
        moved_paths = _move_pieces(layout, d.fd, stats, block, report, say)
    finally:
        d.close()   # frees the files' old blocks, now owned by the donor
    report.moved_files = len(moved_paths)
    report.extents_after = _extent_count(moved_paths)
    placement = Placement()
    for name, s in targets.items():
        report.model_after[name] = schedule_cost(s, profiles[name][0], placement.locate).as_dict()

    say(f"moved {report.moved_files} files; re-analyzing the schedules that read them")

    # 5. Record, then remap every active schedule that reads a moved file.
    affected = [s.app_name for s in all_active if moved_paths & {f.path for f in s.files}]
    report.reanalysis = reanalyze(conn, affected, placement)
    report.relocation_id = insert_relocation(conn, report.apps, dev, report.region["start_sector"],
                                             layout.region_bytes, report.moved_files, report.moved_bytes,
                                             report.to_json())
    return report


def _move_pieces(layout, donor_fd: int, stats, block: int, report: Report, say) -> set:
    """Move the layout's pieces into the donor's region, in order; SIGINT/SIGTERM only stop
    between two moves. Returns the paths moved; refusals and an interruption go to report."""
    moved_paths = set()
    stop = _StopFlag()
    with stop:
        for i, p in enumerate(layout.pieces):
            if stop.requested:
                report.interrupted = True
                report.warnings.append(f"interrupted after {i} of {len(layout.pieces)} pieces; "
                                       "every file is intact, run relocate again to finish")
                break
            why = _move_piece(p, donor_fd, stats[p.path])
            if why:
                report.refused.append({"path": os.fsdecode(p.path), "reason": why})
                continue
            moved_paths.add(p.path)
            report.moved_bytes += p.nblocks * block
            if i % 50 == 0:
                say(f"moving: {i + 1}/{len(layout.pieces)} pieces done")
    return moved_paths


def _movable_files(targets: Dict[str, Schedule], report: Report):
    """The scheduled files, the (ext4) file system they are on, and those that may move:
    (stats by path, blocks by movable path, dev, mount point, statvfs). Refusals go to report."""
    wanted: Dict[bytes, Tuple[int, int, int]] = {}
    for s in targets.values():
        for f in s.files:
            wanted.setdefault(f.path, (f.ino, f.size, f.mtime_ns))
    stats: Dict[bytes, os.stat_result] = {}
    for path in wanted:
        try:
            stats[path] = os.stat(path)
        except OSError:
            pass
    dev = _fs_of(stats)
    fstype, mnt = checks.mount_of(dev)
    report.fs_type, report.mountpoint = fstype, os.fsdecode(mnt)
    if fstype != "ext4":
        raise WarmstartError(f"relocation is not supported on {fstype} ({os.fsdecode(mnt)}): only ext4 offers an "
                             f"atomic online extent move (EXT4_IOC_MOVE_EXT); nothing was changed")
    vfs = os.statvfs(mnt)
    block = vfs.f_bsize
    report.block_size = block
    writer_map = checks.writers((st.st_dev, st.st_ino) for st in stats.values())
    movable: Dict[bytes, int] = {}
    for path in wanted:
        why = checks.refusal(path, dev, wanted[path], writer_map)
        if why:
            report.refused.append({"path": os.fsdecode(path), "reason": why})
        elif stats[path].st_size > 0:
            movable[path] = -(-stats[path].st_size // block)
    return stats, movable, dev, mnt, vfs


def _fitting_layout(targets, all_active, movable: Dict[bytes, int], block: int, page_blocks: int,
                    granularity: str, vfs, report: Report):
    """The planned layout, with whole files dropped (and refused in report) until it fits the
    free space less the reserve."""
    layout = planner.plan_layout(targets, all_active, movable, block, page_blocks, granularity)
    free = vfs.f_bavail * vfs.f_frsize
    usable = free - max(RESERVE_MIN_BYTES, int(RESERVE_FRACTION * vfs.f_blocks * vfs.f_frsize))
    report.free_bytes = free
    dropped = set()
    while layout.pieces and layout.region_bytes > usable:
        # Drop every file with a piece past what fits (whole files or nothing), then re-plan.
        dropped |= {p.path for p in layout.pieces if (p.region_block + p.nblocks) * block > usable}
        for path in dropped:
            movable.pop(path, None)
        layout = planner.plan_layout(targets, all_active, movable, block, page_blocks, granularity)
    for path in sorted(dropped):
        report.refused.append({"path": os.fsdecode(path), "reason":
                               f"would need more free space than exists ({free >> 20} MiB free, "
                               f"{max(usable, 0) >> 20} MiB usable for the region): free some space"})
    report.region_bytes = layout.region_bytes
    report.pieces = [dict(asdict(p), path=os.fsdecode(p.path)) for p in layout.pieces]
    report.extents_before = _extent_count(p for p in {p.path for p in layout.pieces})
    return layout


def _move_piece(p: planner.Piece, donor_fd: int, checked: os.stat_result) -> Optional[str]:
    """Move one piece; returns why not, or None when it moved."""
    try:
        ro = os.open(p.path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError as e:
        return f"cannot open it ({e.strerror})"
    try:
        st = os.fstat(ro)
        if (st.st_dev, st.st_ino) != (checked.st_dev, checked.st_ino):
            return "replaced by another file while relocating; left alone"
        if not checks.lease_free_of_writers(ro):
            return "opened for writing by another process while relocating: close it and retry"
        try:
            rw = os.open(p.path, os.O_RDWR | os.O_NOFOLLOW | os.O_CLOEXEC)
        except OSError as e:
            if e.errno == 26:   # ETXTBSY
                return "it is the executable of a running program: stop the program and retry"
            return f"cannot open it for the move ({e.strerror})"
        try:
            if os.fstat(rw).st_ino != st.st_ino:
                return "replaced by another file while relocating; left alone"
            moved = move_extent(rw, donor_fd, p.file_block, p.region_block, p.nblocks, p.path)
        except MoveError as e:
            return str(e)
        finally:
            os.close(rw)
        if moved != p.nblocks:
            return f"the kernel moved only {moved} of {p.nblocks} blocks (file changed size?); the file is intact"
        return None
    finally:
        os.close(ro)


def _extent_count(paths) -> int:
    n = 0
    for path in paths:
        try:
            fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
        except OSError:
            continue
        try:
            n += len(fiemap_fd(fd))
        finally:
            os.close(fd)
    return n


def _median_sector(schedules) -> int:
    sectors = sorted(r.sector for s in schedules for seg in s.segments for r in seg.ranges)
    return sectors[len(sectors) // 2] if sectors else 0


def _predicted_locator(layout: planner.Layout, region_sector: int):
    """locate(range) as if the layout were in place at region_sector (for the dry-run model)."""
    by_path: Dict[bytes, List[planner.Piece]] = {}
    for p in layout.pieces:
        by_path.setdefault(p.path, []).append(p)
    spb = layout.block_size // 512

    def locate(r):
        if r.file is None or r.file_offset is None or r.file.path not in by_path:
            return [(r.sector, r.nr_sectors)]
        blk = r.file_offset // layout.block_size
        for p in by_path[r.file.path]:
            if p.file_block <= blk < p.file_block + p.nblocks:
                start = region_sector + (p.region_block + blk - p.file_block) * spb \
                    + (r.file_offset % layout.block_size) // 512
                return [(start, r.nr_sectors)]
        return [(r.sector, r.nr_sectors)]
    return locate


class _StopFlag:
    """Turn SIGINT/SIGTERM into a flag checked between moves; restore the old handlers after."""

    def __init__(self):
        self.requested = False
        self._old = {}

    def __enter__(self):
        for sig in (signal.SIGINT, signal.SIGTERM):
            try:
                self._old[sig] = signal.signal(sig, self._handle)
            except ValueError:   # not the main thread: leave signals alone
                pass
        return self

    def _handle(self, signum, frame):
        self.requested = True

    def __exit__(self, *exc):
        for sig, old in self._old.items():
            signal.signal(sig, old)
        return False
