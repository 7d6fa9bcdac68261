"""`warmstart analyze`: recordings -> launch sequence -> file map -> segmentation -> schedule.

Probe methods for DISK_ACCESS:
- model:  the stored device profile (`warmstart profile-disk`), no I/O;
- disk:   O_DIRECT reads of each candidate segment on the device (bounded by a time budget);
- hybrid: search on the model, then measure the chosen segmentation, the paper's and one-segment
          reorder on the disk; keep the best by measurement and report the model's error;
- auto (default): hybrid when a profile of the device exists, else disk.
A device that cannot be opened O_DIRECT makes `disk`/`hybrid` fail with the fix (use the model);
`auto` then falls back to `model` if there is a profile, and says so in the result.
"""

import bisect
import os
import time
from dataclasses import dataclass
from typing import Callable, Dict, List, Optional, Sequence, Tuple

from .. import devices
from ..db import profiles as profile_db
from ..db.schedules import save_schedule
from ..model import Range, Schedule, Segment
from ..errors import WarmstartError
from ..fs import metadata as fs_metadata
from . import bound, inputs, probe
from .access import CalibratedCost, DiskCost, ModelCost, WithSteps, calibration, metadata_step
from .ext4meta import MetadataFinder
from .filemap import FileMap, Piece
from .gapmerge import merge_gaps
from .lookups import looked_up_names, lookup_dirs
from .ordering import PieceTable
from .profile import PARALLEL_QD, main_dev, model_profile, profile_without_node, stored_profile
from .segment import Result, launch_time, optimise, paper, reorder
from .sequence import Access, LaunchSequence, from_requests, merge_recordings
from .strips import geometry_from_sysfs, split_at_strips, whole_stripes

PROBES = ("auto", "model", "disk", "hybrid")
ALGORITHMS = ("optimal", "paper", "reorder")


@dataclass
class Options:
    probe: str = "auto"
    algorithm: str = "optimal"
    runs_threshold: Optional[int] = None      # K of N; default: a majority
    recording_ids: Sequence[int] = ()
    allow_lost: bool = False
    metadata_first: bool = True
    step_by_segment: bool = True              # the metadata step split by segment (False: all before segment 1)
    file_metadata: bool = True                # add each file's open() metadata from the fs (ext4meta)
    gap_merge: bool = True
    trim_unused: bool = True                  # fetch only pages the recorded launch used (page_uses)
    strip_bytes: Optional[int] = None
    stripe_disks: Optional[int] = None
    search_budget_s: float = 0.5              # model search
    disk_budget_factor: float = 0.5           # disk probing, x the recorded cold launch time
    # CPU of a prefetched launch / CPU of the traced cold recording. Measured per app from the
    # recordings' warm run (see cpu_scale_of); this fallback, for recordings without one, is what
    # the python stdlib launch measured (docs/algorithms.md). `optimal` is searched robustly over
    # {cpu_scale, 1} and its t_exp uses cpu_scale; `paper` is unchanged.
    cpu_scale: Optional[float] = None
    fallback_cpu_scale: float = 0.45
    save: bool = True


def _lost_check(recs, allow_lost: bool):
    bad = [r for r in recs if r.lost_events or r.status != "ok"]
    if bad and not allow_lost:
        ids = ", ".join(f"#{r.id} ({r.lost_events} lost)" for r in bad)
        raise WarmstartError(f"recording(s) {ids} lost trace events, so the launch sequence is incomplete: "
                             f"record again (`warmstart record`), pick others with --recording, "
                             f"or accept it with --allow-lost")
    return bad


def cpu_scale_of(recs, fallback: float) -> Tuple[float, str]:
    """Median warm CPU / recorded CPU over the recordings that measured both, clamped to (0, 1]."""
    ratios = sorted(r.warm_cpu_s / r.cpu_total_s for r in recs
                    if r.warm_cpu_s is not None and r.cpu_total_s)
    if not ratios:
        return fallback, "default (no warm run recorded)"
    mid = len(ratios) // 2
    median = ratios[mid] if len(ratios) % 2 else (ratios[mid - 1] + ratios[mid]) / 2
    return min(1.0, max(0.05, median)), f"measured (warm/recorded CPU of {len(ratios)} recording(s))"


def build_sequence(conn, recs, k: Optional[int]) -> LaunchSequence:
    seqs = []
    for r in recs:
        reqs = inputs.requests(conn, r.id)
        total = int(r.cpu_total_s * 1e9) if r.cpu_total_s is not None else None
        seqs.append((r.id, from_requests(reqs, cpu_total_ns=total)))
    if k is None:
        k = len(seqs) // 2 + 1
    return merge_recordings(seqs, k)


def file_map(conn, rids: Sequence[int], trim_unused: bool = True) -> FileMap:
    """The recordings' files as they are now, with the raw-range policy of this machine's mounts
    (unmapped reads kept only where a raw read of the device can help: warmstart/fs/metadata.py)."""
    return FileMap(inputs.files(conn, rids), inputs.added_pages(conn, rids),
                   inputs.used_pages(conn, rids) if trim_unused else None, fs_metadata.RawReadPolicy())


def map_sequence(seq: LaunchSequence, fmap: FileMap, keep_fs_meta: bool = True):
    """Pieces of every p_i. A read of XFS/btrfs metadata (FileMap.fs_meta_reads: the replayer's
    metadata step reads it through the file system) stays in the sequence as a point in time with
    no pieces, its CPU after it its own: the step's work is split by segment like the data
    (access.WithSteps), and a launch that reads many small files inline in btrfs's tree (git's
    loose objects) is a sequence of such reads with its CPU between them, not one lump after its
    last data read (keep_fs_meta=False: dropped like the rest, as before 2026-11-29, when the
    whole step ran before segment 1). Any other access with nothing left (a deleted file) gives
    its CPU to the previous. Returns (the accesses kept, their pieces, and for each the launch's
    reads of XFS/btrfs metadata since the previous one's, its own included: for the bound and
    the step)."""
    items: List[List[Piece]] = []
    kept: List[Access] = []
    meta: List[List[Tuple[int, int, int]]] = []
    pending: List[Tuple[int, int, int]] = []
    carry = 0
    for a in seq.accesses:
        seen = len(fmap.fs_meta_reads)
        pieces = fmap.map_access(a)
        pending += fmap.fs_meta_reads[seen:]
        if not pieces and not (pending and keep_fs_meta):
            if kept:
                kept[-1].cpu_ns += a.cpu_ns
            else:
                carry += a.cpu_ns
            continue
        kept.append(Access(a.dev, a.sector, a.nr_sectors, a.cpu_ns + carry, a.is_meta, a.busy_after_ns))
        carry = 0
        items.append(pieces)
        meta.append(pending)
        pending = []
    if meta:
        meta[-1] += pending
    return kept, items, meta


def first_accesses(kept: Sequence[Access], places: Sequence[Optional[Tuple[int, int]]]) -> List[Optional[int]]:
    """For each recorded read's place (dev, sector), the first p_i that reads it; None for no
    place, or one no p_i reads (a block the sequence left out)."""
    spans = sorted((a.dev, a.sector, a.end, i) for i, a in enumerate(kept))
    starts = [(d, s) for d, s, _, _ in spans]
    longest = max((e - s for _, s, e, _ in spans), default=0)
    out: List[Optional[int]] = []
    for place in places:
        best = None
        j = bisect.bisect_right(starts, place) - 1 if place is not None else -1
        while j >= 0 and spans[j][0] == place[0] and spans[j][1] > place[1] - longest:
            if spans[j][2] > place[1] and (best is None or spans[j][3] < best):
                best = spans[j][3]
            j -= 1
        out.append(best)
    return out


def place_inline(conn, rids: Sequence[int], fmap: FileMap, kept: Sequence[Access],
                 spans: Sequence[Tuple[int, int]], segments: List[Segment], by_segment: bool) -> None:
    """Files read with their data inline in the metadata (no extent, so in no recorded read):
    each put first in the segment (spans: each one's first and last p_i) of the last read the
    launch completed before it added the file's page (else, and without by_segment, the
    pre-buffer); the metadata step's seek of the file reads it before that segment's data, so
    the range then costs no disk read."""
    inline = fmap.inline_ranges()
    if not inline or not segments:
        return
    at: List[Optional[int]] = [None] * len(inline)
    if by_segment:
        keys = [fmap.recorded_key[r.file] for r in inline]
        before = inputs.read_before_first_add(conn, rids, set(keys))
        at = first_accesses(kept, [before.get(k) for k in keys])
    first = [a for a, _ in spans]
    placed: List[List[Range]] = [[] for _ in segments]
    for r, i in zip(inline, at):
        placed[bisect.bisect_right(first, i) - 1 if i is not None else 0].append(r)
    for g, rs in zip(segments, placed):
        g.ranges[:0] = rs
        g.bytes += sum(r.length for r in rs)


def add_file_metadata(items: List[List[Piece]]) -> dict:
    """Put the blocks the kernel reads to open each scheduled file (its inode-table block, extent
    tree, and the directories on its path: ext4meta) into the p_i that first reads the file,
    unless the recording already holds them.

    What a recording saw of the metadata depends on what happened to be cached: after a launch
    that updated atimes, the inode-table blocks stay pinned by the journal through sync and
    drop_caches until jbd2 checkpoints them, so the next recording misses them; a later launch
    then reads them synchronously, a seek each, in the middle of the replayer's sorted sweep
    (python stdlib launch, emulated hdd7200: the same data took 0.60 s instead of 0.42 s).

    Only for files on a file system whose metadata mode is "bdev" (warmstart/fs/metadata.py);
    the others' metadata is warmed through the file system by the replayer (not blocks here)."""
    have = set()
    mode_of: Dict[int, str] = {}
    types = fs_metadata.fstypes()
    by_fs: Dict[str, str] = {}
    for ps in items:
        for p in ps:
            if p.file is None:
                have.update((p.dev, x) for x in range(p.sector, p.end))
    os.sync()   # inodes and extent roots are read from the device
    finder = MetadataFinder()
    added = added_bytes = 0
    done = set()
    try:
        for ps in items:
            extra = []
            for p in ps:
                if p.file is None or p.file in done:
                    continue
                done.add(p.file)
                try:
                    st = os.stat(p.file.path)
                except OSError:
                    continue
                if (st.st_dev, st.st_ino) != (p.file.dev, p.file.ino):
                    continue
                if mode_of.setdefault(st.st_dev, fs_metadata.metadata_mode(types.get(st.st_dev))) != fs_metadata.BDEV:
                    by_fs[f"{os.major(st.st_dev)}:{os.minor(st.st_dev)}"] = \
                        f"{types.get(st.st_dev, 'unmounted')}: warmed through the file system"
                    continue
                for dev, sector, nr in finder.for_file(p.file.path, st):
                    if all((dev, x) in have for x in range(sector, sector + nr)):
                        continue
                    have.update((dev, x) for x in range(sector, sector + nr))
                    extra.append(Piece(dev, sector, nr, True, None, 0, nr * 512))
            ps[:0] = extra
            added += len(extra)
            added_bytes += sum(x.length for x in extra)
    finally:
        finder.close()
    return {"blocks": added, "bytes": added_bytes, "unsupported": dict(finder.reasons), "through_fs": by_fs}


def _to_ranges(pieces: Sequence[Piece]) -> List[Range]:
    return [Range(p.dev, p.sector, p.nr_sectors, p.length, p.file, p.file_offset if p.file else None,
                  p.first_p or None) for p in pieces]


@dataclass
class CostSetup:
    """How DISK_ACCESS is answered for this analysis (step 4 of analyze)."""
    dev: int                          # the device the schedule is timed on
    dev_path: Optional[str]
    prof: Optional[object]            # its DiskProfile, if any
    profile_id: Optional[int]
    method: str                       # disk | model | hybrid, after fallbacks
    model: Optional[ModelCost]
    disk: Optional[DiskCost]
    notes: Dict[str, object]
    # per p_i: the launch's reads of XFS/btrfs metadata it needs (map_sequence), and the profile
    # each device's are timed on: a segment's share of the metadata step (access.WithSteps)
    meta_reads: Sequence[Sequence[Sequence[int]]] = ()
    profile_of: Optional[Callable[[int], object]] = None

    @property
    def search(self):
        """The cost the segmentation search runs on, each segment with its metadata step."""
        return self.timed(self.model if self.method in ("model", "hybrid") else self.disk)

    def timed(self, base):
        """A segment's time in the launch: `base`'s DISK_ACCESS and the metadata step the replayer
        runs before the segment's data (access.WithSteps); `base` itself where there is no step."""
        if not any(self.meta_reads) or self.profile_of is None:
            return base
        return WithSteps(base, self.meta_reads, self.profile_of)


def _check_options(opts: Options) -> None:
    if opts.probe not in PROBES:
        raise WarmstartError(f"unknown probe {opts.probe!r}: use one of {', '.join(PROBES)}")
    if opts.algorithm not in ALGORITHMS:
        raise WarmstartError(f"unknown algorithm {opts.algorithm!r}: use one of {', '.join(ALGORITHMS)}")


def cost_setup(conn, items, table: PieceTable, opts: Options, cold_s: float) -> CostSetup:
    """The device, its profile, whether it can be probed, and the costs to segment with (the
    metadata step's, meta_reads and profile_of, are set by the caller)."""
    dev = main_dev(conn, (p for ps in items for p in ps))
    dev_path, prof_row = stored_profile(conn, dev)
    profile_id, prof = prof_row if prof_row else (None, None)
    method = opts.probe
    notes: Dict[str, object] = {}
    if method == "auto":
        method = "hybrid" if prof else "disk"
    if method in ("disk", "hybrid"):
        try:
            if dev_path is None:
                raise WarmstartError(f"device {dev} is not present")
            probe.check_direct(dev_path)
        except WarmstartError as e:
            if opts.probe != "auto":
                raise
            if prof is None:
                # The node refuses O_DIRECT (a VM's or container's disk): profile it another way,
                # once, and keep the profile as `profile-disk` would
                prof, how = profile_without_node(dev, devices.rotational(dev), reuse=True)
                profile_id = profile_db.save_profile(conn, dev_path or f"dev {dev}", dev, prof, 0.0)
                notes["profiled"] = how
            notes["fallback"] = f"disk probes impossible ({e}); used the model"
            method = "model"
    if method in ("model", "hybrid") and prof is None:
        raise WarmstartError(f"no device profile for {dev_path or dev}: run `warmstart profile-disk "
                             f"{dev_path or '/dev/...'}` first, or use --probe disk")
    model = ModelCost(table, prof) if prof else None
    disk = None
    if method in ("disk", "hybrid"):
        others = {p.dev for ps in items for p in ps} - {dev}
        fallback = {d: row[1] for d in others for row in [profile_db.latest_profile(conn, d)] if row}
        if prof:
            fallback[dev] = prof
        # probed as the replayer fetches: with many requests in flight where that saves time
        qd = PARALLEL_QD if prof is not None and prof.overlaps else 1
        disk = DiskCost(table, budget_s=opts.disk_budget_factor * cold_s, paths={dev: dev_path}, fallback=fallback,
                        qd=qd)
    return CostSetup(dev, dev_path, prof, profile_id, method, model, disk, notes)


@dataclass
class Segmentation:
    """The result of step 5: the chosen split, what it was compared with, and on which CPU."""
    chosen: Result
    compare: Dict[str, dict]
    model_error: Optional[dict]
    cpu_scale: float
    scale_source: str


def segmentation(cpu_s: List[float], recs, opts: Options, cost: CostSetup, say) -> Segmentation:
    """Algorithm 1 (paper), the optimising search and reorder on the search cost; with hybrid
    probes, the candidates are then timed on the disk and the disk's verdict is kept."""
    search_cost = cost.search
    res_paper = paper(cpu_s, search_cost)
    if opts.cpu_scale is not None:
        cpu_scale, scale_source = opts.cpu_scale, "given"
    else:
        cpu_scale, scale_source = cpu_scale_of(recs, opts.fallback_cpu_scale)
    scales = (cpu_scale, 1.0) if cpu_scale != 1.0 else (1.0,)
    res_opt = optimise(cpu_s, search_cost, time_budget_s=opts.search_budget_s, cpu_scales=scales) \
        if opts.algorithm == "optimal" else None
    pre = [0.0]
    for c in cpu_s:
        pre.append(pre[-1] + c)
    if res_opt:  # the optimiser's T and t_exp are on the expected (scaled) CPU
        pre = [x * cpu_scale for x in pre]
    compare: Dict[str, dict] = {"paper": {"t_exp_s": res_paper.t_exp, "t_model_s": res_paper.t_model,
                                          "segments": len(res_paper.segments)}}
    if res_opt:
        compare["optimal"] = {"t_model_s": res_opt.t_model, "segments": len(res_opt.segments),
                              "start": res_opt.notes.get("start")}
    compare["reorder"] = {"t_model_s": launch_time([(0, len(cpu_s) - 1)], search_cost, pre)}
    res_reorder = reorder(cpu_s, search_cost) if opts.algorithm == "reorder" else None
    chosen: Result = res_opt or res_reorder or res_paper
    model_error = None
    if cost.method == "hybrid":
        say("confirming on the disk")
        chosen, model_error = _confirm_on_disk(cost, chosen, res_paper, res_opt, pre, compare)
        if res_opt:
            chosen = _calibrated_search(cost, cpu_s, scales, opts, pre, chosen, compare)
            if compare["paper"]["t_disk_s"] < chosen.t_model:   # the disk decides among all it timed
                t = compare["paper"]["t_disk_s"]
                disk = cost.timed(cost.disk)
                chosen = Result("optimal", res_paper.segments, [disk(a, b) for a, b in res_paper.segments],
                                [pre[b + 1] - pre[a] for a, b in res_paper.segments], t, t,
                                notes={"start": "paper (disk)"})
    return Segmentation(chosen, compare, model_error, cpu_scale, scale_source)


def _calibrated_search(cost: CostSetup, cpu_s: List[float], scales, opts: Options, pre, chosen: Result,
                       compare: Dict[str, dict]) -> Result:
    """Search again on the model corrected by what the disk answered so far (access.calibration
    over every segment it timed), time that split on the disk, and keep it only if the disk says
    it is faster than the chosen one. The model underrates scattered segments more than one
    long sweep (pycompile, emulated hdd7200: later segments of 3.4 MiB took 0.27 s in the launch,
    0.17 s modelled), so the split it found paid more for its extra sweeps than it hid."""
    pairs = [(cost.model(*ab), t) for ab, t in cost.disk.measured().items()]
    alpha, beta = calibration(pairs)
    disk = cost.timed(cost.disk)
    res = optimise(cpu_s, cost.timed(CalibratedCost(cost.model, alpha, beta)), time_budget_s=opts.search_budget_s,
                   cpu_scales=scales)
    measured = launch_time(res.segments, disk, pre)
    compare["calibrated"] = {"alpha": alpha, "beta_s": beta, "segments": len(res.segments),
                             "t_model_s": res.t_model, "t_disk_s": measured, "kept": measured < chosen.t_model}
    if measured >= chosen.t_model:
        return chosen
    return Result("optimal", res.segments, [disk(a, b) for a, b in res.segments],
                  [pre[b + 1] - pre[a] for a, b in res.segments], measured, measured,
                  notes={"start": "calibrated"})


def _confirm_on_disk(cost: CostSetup, chosen: Result, res_paper: Result, res_opt: Optional[Result], pre,
                     compare: Dict[str, dict]) -> Tuple[Result, dict]:
    """Time the candidates on the disk: the model only chose where to look (the model's error is
    of DISK_ACCESS alone, without the metadata step both add)."""
    model, n = cost.model, len(pre) - 1
    cost.disk.deadline = None  # the few confirmation probes always run
    disk = cost.timed(cost.disk)
    measured = {}
    cands = {"paper": res_paper.segments, "reorder": [(0, n - 1)]}
    if res_opt:
        cands["optimal"] = res_opt.segments
    for name, segs in cands.items():
        measured[name] = launch_time(segs, disk, pre)
        compare[name]["t_disk_s"] = measured[name]
    modelled = {ab: model(*ab) for ab in cost.disk.measured()}
    errs = [(modelled[ab] - t) / t for ab, t in cost.disk.measured().items() if t > 0]
    model_error = {"segments": len(errs), "median": sorted(errs)[len(errs) // 2] if errs else None,
                   "min": min(errs) if errs else None, "max": max(errs) if errs else None}
    if res_opt and measured["reorder"] < measured["optimal"]:
        # the model misled the search: keep what the disk says is better
        return Result("optimal", [(0, n - 1)], [disk(0, n - 1)], [pre[-1]], measured["reorder"],
                      measured["reorder"], notes={"start": "reorder (disk)"}), model_error
    chosen = Result(chosen.algorithm, chosen.segments, [disk(a, b) for a, b in chosen.segments],
                    chosen.cpu, chosen.t_exp, launch_time(chosen.segments, disk, pre))
    if chosen.algorithm == "paper":
        t = chosen.t_disk
        chosen.t_exp = t[0] + pre[-1] if len(t) == 1 else t[0] + t[1] + pre[-1] - pre[chosen.segments[1][0]]
    else:
        chosen.t_exp = chosen.t_model
    return chosen, model_error


@dataclass
class Ordered:
    """Step 6: the schedule's segments in fetch order, and what merging and strips did."""
    segments: List[Segment]
    waste: int
    merged_gaps: int
    skipped_gaps: int
    gap_bytes: int
    strip: int
    disks: int


def order_segments(chosen: Result, table: PieceTable, cost: CostSetup, opts: Options) -> Ordered:
    """Fetch order inside each segment (metadata, then data, each LBA-sorted: PieceTable),
    competitive gap merging, strip alignment."""
    prof = cost.prof
    strip, disks = opts.strip_bytes, opts.stripe_disks
    if strip is None:
        strip, disks = geometry_from_sysfs(cost.dev)
    gap_bytes = prof.gap_merge_bytes if (prof and opts.gap_merge) else 0
    # read through a gap when its transfer costs less than the switch over that distance
    worth = (lambda gap: gap / prof.r_tr_Bps <= float(prof.seek_s(gap))) if gap_bytes else None
    waste = merged_gaps = skipped_gaps = 0
    segments: List[Segment] = []
    for i, (a, b) in enumerate(chosen.segments):
        pieces = table.segment_pieces(a, b)
        if gap_bytes:
            # merge within each sweep (metadata, data) only: never across the two
            meta = [p for p in pieces if p.file is None] if opts.metadata_first else []
            data = pieces[len(meta):]
            m1, s1 = merge_gaps(meta, gap_bytes, worth)
            m2, s2 = merge_gaps(data, gap_bytes, worth)
            pieces = m1 + m2
            waste += s1.waste_bytes + s2.waste_bytes
            merged_gaps += s1.merged_gaps + s2.merged_gaps
            skipped_gaps += s1.skipped_gaps + s2.skipped_gaps
        if strip:
            pieces = split_at_strips(pieces, strip)
            pieces, w = whole_stripes(pieces, strip, disks or 0)
            waste += w
        ranges = _to_ranges(pieces)
        segments.append(Segment(i + 1, a + 1, b + 1, chosen.t_disk[i], chosen.cpu[i],
                                sum(r.length for r in ranges), ranges))
    return Ordered(segments, waste, merged_gaps, skipped_gaps, gap_bytes, strip or 0, disks or 0)


def analyze(conn, app_name: str, opts: Options = Options(), progress: Optional[Callable[[str], None]] = None) -> dict:
    """Analyze app_name's recordings and (unless opts.save is False) store the schedule; returns a
    JSON-safe report. The steps, in order: the recordings (1), the launch sequence (2), the file
    map (3) with each file's metadata, the cost model (4), the segmentation (5), the order, gap
    merging and strips inside each segment (6), the schedule (7)."""
    say = progress or (lambda s: None)
    t_start = time.monotonic()
    _check_options(opts)
    app = inputs.app_id(conn, app_name)                                             # 1
    recs = inputs.recordings(conn, app, opts.recording_ids)
    if not recs:
        raise WarmstartError(f"app {app_name!r} has no recordings: record it with `warmstart record --name {app_name} -- CMD`")
    lossy = _lost_check(recs, opts.allow_lost)
    rids = [r.id for r in recs]

    say("building the launch sequence")
    seq = build_sequence(conn, recs, opts.runs_threshold)                           # 2
    fmap = file_map(conn, rids, opts.trim_unused)                                   # 3
    kept, items, meta_reads = map_sequence(seq, fmap, opts.step_by_segment)
    if not any(items):
        raise WarmstartError(f"nothing left to prefetch for {app_name!r} (no reads, or every file changed "
                             f"since recording: {len(fmap.report.skipped)} skipped): record it again")
    cpu_s = [a.cpu_ns / 1e9 for a in kept]
    file_meta = add_file_metadata(items) if opts.file_metadata else None
    table = PieceTable(items, metadata_first=opts.metadata_first)

    cold_s = max(r.launch_time_s for r in recs)
    cost = cost_setup(conn, items, table, opts, cold_s)                             # 4
    profiles: Dict[int, object] = {}

    def profile_of(dev: int):
        if dev not in profiles:
            profiles[dev] = cost.prof if dev == cost.dev and cost.prof else model_profile(conn, dev)[1]
        return profiles[dev]

    if opts.step_by_segment:
        cost.meta_reads, cost.profile_of = meta_reads, profile_of
    say(f"segmenting {len(items)} requests ({cost.method} probes)")
    seg = segmentation(cpu_s, recs, opts, cost, say)                                # 5
    chosen = seg.chosen
    order = order_segments(chosen, table, cost, opts)                               # 6
    segments = order.segments
    place_inline(conn, rids, fmap, kept, chosen.segments, segments, opts.step_by_segment)
    cut = bound.of_analysis(items, [a.busy_after_ns for a in kept], seg.cpu_scale, cost.prof, cost.dev,
                            meta_reads)
    meta_step = metadata_step(fmap.fs_meta_reads, profile_of,
                              [[r for rs in meta_reads[a:b + 1] for r in rs] for a, b in chosen.segments]
                              if opts.step_by_segment else None)

    with_ranges = {r.file for s in segments for r in s.ranges if r.file is not None}
    # looked up by the metadata step, nothing read
    lookups = fmap.inode_lookups(with_ranges, looked_up_names(conn, rids, [f.path for f in with_ranges], fmap.fss))
    used_files = sorted(with_ranges | set(lookups), key=lambda f: f.path)
    extents = {i: fmap.extents.get(f, []) for i, f in enumerate(used_files)}        # 7
    through_fs = fs_metadata.warm_through_fs({f.dev for f in used_files})
    marked = [f.path for f in used_files if f.dev in through_fs]
    looked_in, looked_report = lookup_dirs(conn, rids, marked, fmap.fss)
    positions = fs_metadata.schedule_step_positions(marked, looked_in, fmap.fss)
    params = {"fs_metadata_devs": through_fs, "metadata_positions": positions,
              "inode_lookups": len(lookups),
              "lookup_dirs": [os.fsdecode(d) for d in looked_in], "name_lookups": looked_report,
              "probe_requested": opts.probe, "runs_threshold": opts.runs_threshold, "metadata_first": opts.metadata_first,
              "file_metadata": file_meta, "gap_merge_bytes": order.gap_bytes, "merged_gaps": order.merged_gaps,
              "skipped_gaps": order.skipped_gaps, "strip_bytes": order.strip, "stripe_disks": order.disks,
              "t_model_s": chosen.t_model, "compare": seg.compare, "model_error": seg.model_error,
              "filemap": fmap.report.to_json(),
              "coverage": [{"recording_id": c.recording_id, "fraction": c.fraction} for c in seq.coverage],
              "lossy_recordings": [r.id for r in lossy], "cpu_scale": seg.cpu_scale, "cpu_placement": seq.cpu_placement,
              "cpu_scale_source": seg.scale_source, "bound": cut.to_json(), "metadata_step": meta_step, **cost.notes}
    sched = Schedule(None, app_name, chosen.algorithm, cost.method,
                     chosen.t_exp + (0.0 if opts.step_by_segment else meta_step["t_s"]),
                     sum(s.bytes for s in segments), order.waste, rids, segments, used_files, extents,
                     profile_id=cost.profile_id, params=params)
    if opts.save:
        save_schedule(conn, sched, app_id=app)
    model, disk = cost.model, cost.disk
    return {
        "app": app_name, "schedule_id": sched.id, "algorithm": chosen.algorithm, "probe": cost.method,
        "requests": len(items), "segments": [len(s.ranges) for s in segments],
        "segment_p": [[s.first_p, s.last_p] for s in segments],
        "t_disk_s": chosen.t_disk, "cpu_s": chosen.cpu, "t_exp_s": sched.t_exp_s, "t_model_s": chosen.t_model,
        "total_bytes": sched.total_bytes, "waste_bytes": order.waste, "files": len(used_files),
        "dropped_writes": seq.dropped_writes, "dropped_rereads": seq.dropped_rereads,
        "probe_calls": {"model": model.calls if model else 0, "disk": disk.calls if disk else 0},
        "disk_probe_s": disk.probe_s if disk else 0.0,
        "unprobed_devices": {f"{os.major(d)}:{os.minor(d)}": why for d, why in (disk.unprobed.items() if disk else ())},
        "analysis_s": time.monotonic() - t_start, "cold_launch_s": cold_s,
        **params, "metadata_positions": len(positions),
    }
