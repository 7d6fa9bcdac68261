"""A schedule fetched whole: the same ranges as a segmented schedule, in one segment in fetch
order (analyzer/ordering.py: the metadata sweep, then the data, each by LBA) read before the
release, the metadata step all before it (what `--mode reorder` replays, the bench's
reorder-ours). The hook's feedback tries it against the segmented schedule it comes from and
keeps the faster (hook/trial.py, docs/hook.md "Segmented or whole")."""

import copy

from ..model import Schedule, Segment
from .ordering import fetch_order


def fetched_whole(sched: Schedule) -> Schedule:
    """`sched` as one segment (not stored: id None). Its t_1 is the segments' disk times without
    their shares of the metadata step, which runs whole before it; t_exp = t_1 + the step + all
    the app's CPU (the reorder baseline's t_exp, docs/algorithms.md)."""
    params = copy.deepcopy(sched.params)
    step = params.get("metadata_step") or {}
    shares = sum(step.pop("segments_s", None) or ())
    step.pop("segments", None)
    t_disk = max(0.0, sum(s.t_disk_s for s in sched.segments) - shares)
    cpu = sum(s.cpu_s for s in sched.segments)
    # the ranges as one segment is fetched (metadata first where the analysis ordered so: the
    # replayer's reorder does too), a device range listed by two segments once
    ranges = fetch_order([r for s in sched.segments for r in s.ranges], params.get("metadata_first", True))
    seg = Segment(1, sched.segments[0].first_p, sched.segments[-1].last_p, t_disk, cpu,
                  sum(r.length for r in ranges), ranges)
    params["whole_of"] = sched.id
    return Schedule(None, sched.app_name, sched.algorithm, sched.probe, t_disk + float(step.get("t_s", 0.0)) + cpu,
                    seg.bytes, sched.waste_bytes, list(sched.recording_ids), [seg], list(sched.files),
                    copy.deepcopy(sched.extents), profile_id=sched.profile_id, params=params)
