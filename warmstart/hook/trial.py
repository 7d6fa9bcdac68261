"""Segmented or whole (docs/hook.md): the measured check of the segmentation's one choice the
model can get wrong by the most, made with the app's own hooked launches.

The analysis releases the app after the first segment and fetches the rest beside it because its
model says that is sooner than fetching the schedule whole first. Where the model is wrong (the
metadata step of XFS and btrfs split into passes that each seek again and queue behind the app's
own reads; a disk busier than profiled) the segmented launch can be slower than the same
schedule fetched whole. So after the first comparable launch of a segmented schedule the app's
next launches use the schedule fetched whole (analyzer/whole.py); after its first comparable
launch the faster of the two is kept, the whole one only if faster by the noise margin of the
app's cold launches: settled within 3 launches from one launch of each, so up to the noise of
one launch the steady state is not slower than fetching the schedule whole by more than that
margin. Decided once per schedule (a new analysis tries again).

Not tried where it cannot win: fetching whole can only take away the segmented launch's waits,
the time its app waited on the disk or for a CPU the replay held (the replayer's app watch: its
waits and run-queue time), since its hold fetches a superset of the segmented one's. When those
are well below the margin the whole one would have to beat (WAIT_UNDERCOUNT: the watch's sampled
count was 0.86-1.07 x the app's own figure, docs/replayer.md), its launch could not be kept and
would cost one launch fetched whole for nothing (pycompile on the emulated SSD's btrfs: 0.80 s
whole against 0.53 s segmented, whose app waited 29 + 22 ms against a 165 ms margin): the segmented one is
kept after its first launch.

A comparable launch (feedback.judge): timed, alone on the disk, started cold, its prefetched pages
kept to its exit."""

import statistics
from typing import List, Optional

from ..analyzer.whole import fetched_whole
from ..db import launches
from ..db.schedules import (active_schedule_ids, activate_schedule, app_of_schedule, insert_schedule,
                            load_schedule, set_schedule_param)


def comparable_times(conn, schedule_id: int) -> List[float]:
    """The times of the schedule's comparable hooked launches, oldest first."""
    return [r["launch_time_s"] for r in launches.list_launches(conn, app_id=app_of_schedule(conn, schedule_id),
                                                               mode="hook")
            if r["schedule_id"] == schedule_id and r["launch_time_s"] is not None
            and (r["details"].get("feedback") or {}).get("comparable")]


# the watch's count of the app's waits can be this much below the app's own (docs/replayer.md)
WAIT_UNDERCOUNT = 0.8


def step(conn, schedule_id: int, launch_s: float, margin_s: float,
         waited_s: Optional[float] = None) -> Optional[dict]:
    """After a comparable hooked launch of the schedule (inside the caller's transaction): start
    the trial (the schedule fetched whole stored and made active), or settle it (the faster
    active; the whole one only if faster by margin_s, the noise of the app's launches); what was
    done, with `active` the schedule made active (None: unchanged), or None where there is
    nothing to try (settled, one segment, or no longer the app's schedule). waited_s: what the
    segmented launch's app waited, on the disk and for a CPU (None: not watched); far below
    margin_s, the trial is settled without trying whole (above)."""
    if schedule_id not in active_schedule_ids(conn):
        return None    # replaced since the launch (a new analysis): its trial is moot
    sched = load_schedule(conn, schedule_id)
    p = sched.params
    if p.get("trial"):
        return None    # settled
    segmented = p.get("whole_of")
    if segmented is None:
        if len(sched.segments) < 2 or p.get("whole_variant"):
            return None
        if waited_s is not None and waited_s / WAIT_UNDERCOUNT < margin_s:
            decision = {"state": "kept segmented", "segmented": schedule_id, "whole": None,
                        "t_segmented_s": launch_s, "waited_s": waited_s, "margin_s": margin_s}
            set_schedule_param(conn, schedule_id, "trial", decision)
            return {**decision, "active": None}
        whole = insert_schedule(conn, fetched_whole(sched))
        set_schedule_param(conn, schedule_id, "whole_variant", whole)
        return {"state": "trying whole", "segmented": schedule_id, "whole": whole,
                "t_segmented_s": launch_s, "active": whole}
    before = comparable_times(conn, segmented)
    if not before:
        return None    # the segmented schedule's launches are gone (forgotten): nothing to compare
    t_seg = statistics.median(before)
    keep_whole = launch_s < t_seg - margin_s
    decision = {"state": "kept whole" if keep_whole else "kept segmented", "segmented": segmented,
                "whole": schedule_id, "t_segmented_s": t_seg, "t_whole_s": launch_s, "margin_s": margin_s,
                "active": None if keep_whole else segmented}
    for sid in (segmented, schedule_id):
        set_schedule_param(conn, sid, "trial", {k: v for k, v in decision.items() if k != "active"})
    if not keep_whole:
        activate_schedule(conn, sched.app_name, segmented)
    return decision


def describe(t: dict) -> str:
    """One trial step in words (bench tables, `hook status`)."""
    if t.get("whole") is None:
        return (f"kept segmented, not tried whole: its app waited {t['waited_s']:.3f} s (disk and CPU) in a "
                f"launch of {t['t_segmented_s']:.3f} s, all a whole fetch could save, below the "
                f"{t['margin_s']:.3f} s it would have to save; schedule {t['segmented']} serves the app")
    if t["state"] == "trying whole":
        return (f"a segmented launch took {t['t_segmented_s']:.3f} s; the schedule fetched whole (schedule "
                f"{t['whole']}) serves the next launch, then the faster is kept")
    return (f"{t['state']}: whole {t['t_whole_s']:.3f} s against segmented {t['t_segmented_s']:.3f} s "
            f"(the whole one kept only if faster by {t['margin_s']:.3f} s); schedule "
            f"{t['whole'] if t['state'] == 'kept whole' else t['segmented']} serves the app")
